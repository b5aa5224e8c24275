package cli

import (
	"flag"
	"os"
	"testing"

	"go.uber.org/goleak"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	cleanupBinaries()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
