package controller_test

import (
	"flag"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/internal/configtest"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func load(t *testing.T) *config.Config { return configtest.SmallWorld(t) }

// cfg parses the two-region world afresh (tests change its controller
// settings).
func cfg(t *testing.T) *config.Config { return configtest.TwoRegions(t) }
