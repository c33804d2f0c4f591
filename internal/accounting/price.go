package accounting

import "github.com/shaperproxy/shaperproxy/internal/profile"

// Cost is a Usage priced with a profile's prices.
type Cost struct {
	// USD is the cost in US dollars at the profile's prices (hit and miss
	// prompt tokens, output tokens at the output price or zero when that
	// is unknown); USDKnown is false when the prompt prices are unknown.
	USD      float64
	USDKnown bool
	// MissEquivalents is the prompt's cost in units of one miss token
	// (hit tokens weigh the hit/miss ratio): what compares policies when
	// only the ratio is known. RatioKnown is false when not even that is.
	MissEquivalents float64
	RatioKnown      bool
}

// Price prices u with p.
func Price(p profile.Prices, u Usage) Cost {
	var c Cost
	c.USD, c.USDKnown = p.Cost(u.Hit, u.Miss, u.Output)
	c.MissEquivalents, c.RatioKnown = p.Relative(u.Hit, u.Miss)
	return c
}
