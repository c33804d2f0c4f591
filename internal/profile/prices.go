package profile

// Prices are an upstream's prices in US dollars per million tokens. Zero
// means unknown. The cache ratio is what the shaping cost model needs;
// the absolute prices are what accounting needs.
type Prices struct {
	// HitPerM is the price of a prompt token served from the cache.
	HitPerM float64
	// MissPerM is the price of a prompt token not in the cache.
	MissPerM float64
	// OutputPerM is the price of a completion token (reasoning included).
	OutputPerM float64
	// Ratio is hit/miss when only the ratio is known (HitPerM and MissPerM
	// are then zero). When both prices are set it is ignored.
	Ratio float64
	// Note says where the prices come from and when they apply.
	Note string
}

// HitRatio returns r = hit/miss, and false when it is not known.
func (p Prices) HitRatio() (float64, bool) {
	if p.MissPerM > 0 {
		return p.HitPerM / p.MissPerM, true
	}
	if p.Ratio > 0 {
		return p.Ratio, true
	}
	return 0, false
}

// Known reports whether the hit and miss prices are known (not only
// their ratio).
func (p Prices) Known() bool { return p.MissPerM > 0 }

// Cost returns the price in US dollars of hit and miss prompt tokens and
// out completion tokens; ok is false when the prompt prices are not known
// (an unknown output price counts as zero).
func (p Prices) Cost(hit, miss, out int64) (usd float64, ok bool) {
	if !p.Known() {
		return 0, false
	}
	return (float64(hit)*p.HitPerM + float64(miss)*p.MissPerM + float64(out)*p.OutputPerM) / 1e6, true
}

// Relative returns the cost of hit and miss prompt tokens in units of one
// miss token (hit tokens weigh the ratio), and false when the ratio is
// not known. It compares policies when only the ratio is known.
func (p Prices) Relative(hit, miss int64) (float64, bool) {
	r, ok := p.HitRatio()
	if !ok {
		return 0, false
	}
	return float64(hit)*r + float64(miss), true
}
