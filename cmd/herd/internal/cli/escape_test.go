package cli

import (
	"strings"
	"testing"
	"unicode"

	"github.com/herdkit/herd/cmd/herd/internal/herdtest"
	"github.com/herdkit/herd/internal/testkit/redistest"
)

// TestEscape: control characters, the line separators and bytes that are
// not UTF-8 come out as Go escapes; other text as it is.
func TestEscape(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "svc-a é 漢字", "svc-a é 漢字"},
		{"newline", "multi\nline", `multi\nline`},
		{"tab and return", "a\tb\r", `a\tb\r`},
		{"terminal escape", "\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"C1 and separators", "a\u0085b\u2028c\u2029", `a\x85b\u2028c\u2029`},
		{"not UTF-8", "a\xffb", `a\xffb`},
		{"replacement character kept", "a\uFFFDb", "a\uFFFDb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := escape(tc.in); got != tc.want {
				t.Errorf("escape(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestControlCharactersAreEscaped: on a real server, a process whose
// Identifier holds a newline and a terminal escape shows in herd status and
// herd processes on one row, escaped. Before, the newline broke the row.
func TestControlCharactersAreEscaped(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	cfg := herdtest.Config("ctl", "a")
	cfg.Identifier = "multi\nline\x1b[2J"
	herdtest.WaitRegistered(t, herdtest.Node(t, inst, cfg), 1)
	env := map[string]string{"REDIS_URL": herdtest.URL(inst)}
	for _, args := range [][]string{{"-lock", "ctl", "status"}, {"-lock", "ctl", "processes"}} {
		code, out, errOut := herd(t, env, args...)
		if code != 0 {
			t.Fatalf("herd %v: exit %d\n%s%s", args, code, out, errOut)
		}
		if !strings.Contains(out, `multi\nline\x1b[2J`) {
			t.Errorf("herd %v does not show the escaped identifier:\n%s", args, out)
		}
		for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			if strings.HasPrefix(line, "line") || strings.IndexFunc(line, unicode.IsControl) >= 0 {
				t.Errorf("herd %v: row broken or control character written: %q", args, line)
			}
		}
	}
}

// TestHelpPrintedOnce: herd -h prints its help once, on stdout; a bad flag
// prints the error and the help on stderr. Before, -h printed it on both.
func TestHelpPrintedOnce(t *testing.T) {
	code, out, errOut := herd(t, nil, "-h")
	if code != 0 || strings.Count(out, "Usage:") != 1 || errOut != "" {
		t.Errorf("herd -h: exit %d, %d usages on stdout, stderr %q", code, strings.Count(out, "Usage:"), errOut)
	}
	code, out, errOut = herd(t, nil, "-no-such-flag")
	if code == 0 || out != "" || strings.Count(errOut, "Usage:") != 1 || !strings.Contains(errOut, "no-such-flag") {
		t.Errorf("herd -no-such-flag: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
