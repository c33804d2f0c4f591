package main

import (
	"testing"

	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/tidwall/sjson"
)

// withReviewAndDeliberate is the default configuration with the masked
// review and the deliberate tool on every route: the deliberate tool is
// added to every request that declares tools, and both finishers follow
// every chat response (they act on some only).
func withReviewAndDeliberate(c *config.Config) {
	c.Review.Routes = []string{"*"}
	c.Deliberate.Routes = []string{"*"}
}

// BenchmarkSeedRequestAll is BenchmarkSeedRequest with the review and the
// deliberate tool on (the request declares tools, so it gets the tool).
func BenchmarkSeedRequestAll(b *testing.B) {
	body, _ := sjson.SetBytes(fixtures.SeedHistory(), "stream", false)
	benchProxy(b, withReviewAndDeliberate, body)
}

// BenchmarkSmallRequestAll is BenchmarkSmallRequestDefault with the review
// and the deliberate tool on.
func BenchmarkSmallRequestAll(b *testing.B) {
	benchProxy(b, withReviewAndDeliberate, small)
}
