// Package cli is the herd command: its flags, its output and its exit
// statuses. The work is done by package operate, the web page by package
// dashboard.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/herdkit/herd/cmd/herd/internal/dashboard"
	"github.com/herdkit/herd/cmd/herd/internal/operate"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/registry"
)

// DefaultURL is the Redis URL used when neither -redis nor $REDIS_URL is set.
const DefaultURL = "redis://127.0.0.1:6379"

// DefaultListen is the default address of herd dashboard.
const DefaultListen = "127.0.0.1:8080"

const usageText = `herd: see and steer the herds of a Redis: who is master, which processes run,
what changes, and a hand-over on request.

Usage:
  herd [global flags] <command> [flags]

Commands:
  status      the master, every registered process, the registry backend and
              warnings where the state is inconsistent [-o table|json]
  processes   the registered processes [-role master|slave] [-o table|json]
  watch       one line per change, live, until Ctrl+C [-o text|json] [-interval D]
  step-down   ask the master to hand over [-to NODE] [-timeout D]; waits for the
              new master and prints it
  dashboard   serve the live web page, /api/status, /metrics and /healthz
              [-listen ADDR] [-allow-step-down] [-interval D] [-assign-sets A,B]
  dead        the dead letters of durable routing (entries a consumer gave up on):
                dead list [-n N] [-o table|json]     the oldest N (100), with errors
                dead retry [-to PROCESS] ID...       send again, to its inbox or -to
                dead drop ID... | -all               delete for good
  assignments the items of an assign item set: who should own each and who does,
              moves in flight, unassigned items [-set NAME] [-o table|json]

Global flags (also accepted after the command):
  -redis URL         Redis URL (default $REDIS_URL, else redis://127.0.0.1:6379):
                       redis://[user:password@]host:port[/db]   one server
                       rediss://...                             over TLS
                       unix:///path/redis.sock                  Unix socket
                       redis://host:port?master_name=NAME[&addr=host:port...]
                                                                Sentinel
                       redis+cluster://host:port[?addr=host:port...]
                                                                Cluster
  -lock NAME         lock name of the herd (default master-election)
  -process-ttl D     the processes' ProcessTTL: a heartbeat older is a warning,
                     and the dashboard's age indicator turns red near it (45s)

Exit status:
  0   success
  1   any other error
  2   bad command, flag or argument
  3   the -redis URL cannot be parsed
  4   Redis cannot be reached (refused, unknown host, timeout, TLS)
  5   Redis refused the user name or password
  6   Redis's ACL refused a command, key or channel
  7   unknown lock name: nothing is registered under it (the message lists
      the lock names found on the server); assignments: no such item set
      (the message lists the sets with items)
  8   step-down: no master, -to names no live process, or nobody listens on
      the control channel (the master runs with IgnoreRemoteTransfers)
  9   step-down: no new master within -timeout
  10  step-down: a new master, but not the one -to named (or the same one)

Run 'herd <command> -h' for a command's flags. docs/operating.md has more.
`

// errHelp is returned by a command whose -h was asked for.
var errHelp = flag.ErrHelp

// app is one run of the command.
type app struct {
	stdout, stderr io.Writer
	redisURL       string
	lock           string
	processTTL     time.Duration
	name           string // the command's name in its error message, when not its first word
}

// Main runs the herd command with args, the arguments after the program
// name; getenv reads the environment. It returns the exit status. ctx ends
// the watch and the dashboard (Ctrl+C), which then exit with status 0.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr, redisURL: getenv("REDIS_URL"), lock: masterelection.DefaultConfig().LockName,
		processTTL: registry.DefaultProcessTTL}
	if a.redisURL == "" {
		a.redisURL = DefaultURL
	}
	fs := flag.NewFlagSet("herd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// The usage is printed here, once: on stdout when asked for (-h), on
	// stderr after the flag package's error message otherwise.
	fs.Usage = func() {}
	a.globalFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usageText)
			return operate.ExitOK
		}
		fmt.Fprint(stderr, usageText)
		return operate.ExitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, usageText)
		fmt.Fprintln(stderr, "\nherd: no command given")
		return operate.ExitUsage
	}
	cmds := map[string]func(context.Context, []string) error{
		"status": a.status, "processes": a.processes, "watch": a.watch,
		"step-down": a.stepDown, "dashboard": a.dashboard, "dead": a.dead,
		"assignments": a.assignments,
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	if name == "help" {
		fmt.Fprint(stdout, usageText)
		return operate.ExitOK
	}
	run, ok := cmds[name]
	if !ok {
		fmt.Fprintf(stderr, "herd: unknown command %q: status, processes, watch, step-down, dashboard, dead or assignments ('herd -h' for help)\n", name)
		return operate.ExitUsage
	}
	err := run(ctx, rest)
	if a.name != "" {
		name = a.name
	}
	switch {
	case errors.Is(err, errHelp):
		return operate.ExitOK
	case err != nil:
		fmt.Fprintf(stderr, "herd %s: %v\n", name, err)
	}
	return operate.ExitCode(err)
}

func (a *app) globalFlags(fs *flag.FlagSet) {
	fs.StringVar(&a.redisURL, "redis", a.redisURL, "Redis `URL` (default $REDIS_URL, else "+DefaultURL+")")
	fs.StringVar(&a.lock, "lock", a.lock, "lock `name` of the herd")
	fs.DurationVar(&a.processTTL, "process-ttl", a.processTTL, "the processes' ProcessTTL: older heartbeats are warned about")
}

// command returns the flag set of a command, with the global flags, and
// its usage text.
func (a *app) command(name, args, about string) *flag.FlagSet {
	fs := flag.NewFlagSet("herd "+name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() {
		fmt.Fprintf(a.stderr, "Usage: herd [global flags] %s %s\n\n%s\n\nFlags:\n", name, args, about)
		fs.PrintDefaults()
		fmt.Fprintln(a.stderr, "\nExit statuses: 'herd -h'.")
	}
	a.globalFlags(fs)
	return fs
}

// parse parses a command's flags; it allows no arguments.
func (a *app) parse(fs *flag.FlagSet, args []string) error {
	rest, err := a.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", operate.ErrUsage, rest[0])
	}
	return nil
}

// parseArgs parses a command's flags, which may come before, between and
// after its arguments, and returns the arguments.
func (a *app) parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, errHelp
			}
			return nil, fmt.Errorf("%w: %w", operate.ErrUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		if used := len(args) - fs.NArg(); used > 0 && args[used-1] == "--" {
			rest = append(rest, fs.Args()...) // after "--", only arguments
			break
		}
		rest, args = append(rest, fs.Arg(0)), fs.Args()[1:]
	}
	if a.processTTL <= 0 {
		return nil, fmt.Errorf("%w: -process-ttl %s must be positive", operate.ErrUsage, a.processTTL)
	}
	return rest, nil
}

// oneOf is the check of a flag whose value must be one of choices; an
// empty value passes when optional.
func oneOf(flagName string, v *string, optional bool, choices ...string) func() error {
	return func() error {
		if *v == "" && optional {
			return nil
		}
		for _, c := range choices {
			if *v == c {
				return nil
			}
		}
		return fmt.Errorf("%w: -%s %q: want %s", operate.ErrUsage, flagName, *v, strings.Join(choices, " or "))
	}
}

// format registers the -o flag of a command's output, whose value must be
// one of formats, the first the default, and returns it with its check.
func format(fs *flag.FlagSet, formats ...string) (*string, func() error) {
	out := fs.String("o", formats[0], "output `format`: "+strings.Join(formats, " or "))
	return out, oneOf("o", out, false, formats...)
}

// list writes the table of a list of n rows, or the line none when it is
// empty.
func (a *app) list(n int, none string, table func(w io.Writer)) {
	if n == 0 {
		fmt.Fprintln(a.stdout, none)
		return
	}
	table(a.stdout)
}

// positive is the check of a duration flag that must be above zero.
func positive(flagName string, d *time.Duration) func() error {
	return func() error {
		if *d <= 0 {
			return fmt.Errorf("%w: -%s %s must be positive", operate.ErrUsage, flagName, *d)
		}
		return nil
	}
}

// open parses a command's flags (parse), then connects and opens a Reader
// once the checks of their values pass (connect); the func closes it.
func (a *app) open(ctx context.Context, fs *flag.FlagSet, args []string, checks ...func() error) (*operate.Reader, func(), error) {
	if err := a.parse(fs, args); err != nil {
		return nil, nil, err
	}
	return a.connect(ctx, checks...)
}

// openKnown is open, then one snapshot of the lock (known).
func (a *app) openKnown(ctx context.Context, fs *flag.FlagSet, args []string, checks ...func() error) (*operate.Reader, operate.Snapshot, func(), error) {
	if err := a.parse(fs, args); err != nil {
		return nil, operate.Snapshot{}, nil, err
	}
	return a.known(ctx, checks...)
}

// known is connect, then one snapshot of the lock (snapshot), which fails
// on a lock name nothing is registered under; the func closes the Reader.
func (a *app) known(ctx context.Context, checks ...func() error) (*operate.Reader, operate.Snapshot, func(), error) {
	r, done, err := a.connect(ctx, checks...)
	if err != nil {
		return nil, operate.Snapshot{}, nil, err
	}
	s, err := a.snapshot(ctx, r)
	if err != nil {
		done()
		return nil, s, nil, err
	}
	return r, s, done, nil
}

// connect runs the checks of a command's flag values and arguments, in
// order, then connects and opens a Reader; the func closes it.
func (a *app) connect(ctx context.Context, checks ...func() error) (*operate.Reader, func(), error) {
	for _, check := range checks {
		if err := check(); err != nil {
			return nil, nil, err
		}
	}
	conn, err := operate.Dial(ctx, a.redisURL, a.lock)
	if err != nil {
		return nil, nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, operate.DialTimeout)
	defer cancel()
	r, err := operate.NewReader(rctx, conn, a.processTTL)
	if err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return r, func() { _ = conn.Close() }, nil
}

// snapshot reads one snapshot of a known lock name.
func (a *app) snapshot(ctx context.Context, r *operate.Reader) (operate.Snapshot, error) {
	rctx, cancel := context.WithTimeout(ctx, 2*operate.DialTimeout)
	defer cancel()
	s, err := r.Read(rctx)
	if err != nil {
		return s, err
	}
	if !s.Known {
		return s, operate.UnknownLock(rctx, r.Conn())
	}
	return s, nil
}

func (a *app) status(ctx context.Context, args []string) error {
	fs := a.command("status", "[-o table|json]",
		"Prints the master (node id, identifier, term, time held, lock TTL left), every\nregistered process, the registry backend and warnings.")
	out, checkOut := format(fs, "table", "json")
	r, s, done, err := a.openKnown(ctx, fs, args, checkOut)
	if err != nil {
		return err
	}
	defer done()
	if *out == "json" {
		return writeJSON(a.stdout, s)
	}
	writeStatus(a.stdout, s, r.Conn().URL)
	return nil
}

func (a *app) processes(ctx context.Context, args []string) error {
	fs := a.command("processes", "[-role master|slave] [-o table|json]", "Lists the registered processes, sorted by process id.")
	out, checkOut := format(fs, "table", "json")
	role := fs.String("role", "", "only the processes of this `role`: master or slave")
	_, s, done, err := a.openKnown(ctx, fs, args, checkOut, oneOf("role", role, true, "master", "slave"))
	if err != nil {
		return err
	}
	defer done()
	ps := s.ByRole(registry.Role(*role))
	if *out == "json" {
		b, err := operate.ProcessesJSON(ps)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.stdout, "%s\n", b)
		return err
	}
	a.list(len(ps), "no process registered", func(w io.Writer) { processTable(w, ps) })
	return nil
}

func (a *app) watch(ctx context.Context, args []string) error {
	fs := a.command("watch", "[-o text|json] [-interval D]",
		"Prints one line per change, with its time, until Ctrl+C: master acquired and\n"+
			"released (with term), lock expired with no master, failovers with the time\n"+
			"without a master, processes registered, unregistered and expired, warnings.\n"+
			"Notices only make it look sooner: every change is read from Redis first,\n"+
			"and Redis is read again every -interval, so a lost notice cannot hide one.")
	out := fs.String("o", "text", "output `format`: text, or json (one object per line)")
	interval := fs.Duration("interval", operate.DefaultInterval, "re-sync `interval`: Redis is read at least this often")
	r, done, err := a.open(ctx, fs, args, oneOf("o", out, false, "text", "json"), positive("interval", interval))
	if err != nil {
		return err
	}
	defer done()
	enc := json.NewEncoder(a.stdout)
	return operate.NewWatcher(r, *interval).Run(ctx, func(u operate.Update) {
		for _, e := range u.Events {
			if *out == "json" {
				_ = enc.Encode(e)
				continue
			}
			fmt.Fprintf(a.stdout, "%s  %-15s %s\n", e.Time.Format("2006-01-02 15:04:05.000"), e.Kind, e.Text())
		}
	})
}

func (a *app) stepDown(ctx context.Context, args []string) error {
	fs := a.command("step-down", "[-to NODE] [-timeout D] [-o text|json]",
		"Asks the current master to hand over, by a request on <lock>:control, and waits\n"+
			"until Redis shows the new master. With -to, the lock is reserved for that\n"+
			"process (it must be registered and a candidate). The master must not run\n"+
			"with IgnoreRemoteTransfers.")
	to := fs.String("to", "", "hand over to this `node` id (default: any candidate)")
	timeout := fs.Duration("timeout", operate.DefaultStepDownTimeout, "how long to wait for the new master")
	out, checkOut := format(fs, "text", "json")
	r, done, err := a.open(ctx, fs, args, checkOut, positive("timeout", timeout))
	if err != nil {
		return err
	}
	defer done()
	res, err := operate.StepDown(ctx, r, *to, *timeout)
	if res.To != "" {
		if *out == "json" {
			_ = writeJSON(a.stdout, res)
		} else {
			fmt.Fprintf(a.stdout, "%s is master, term %d (was %s, term %d); took %s\n",
				res.To, res.Term, res.From, res.FromTerm, operate.FormatGap(res.Took))
		}
	}
	return err
}

func (a *app) dashboard(ctx context.Context, args []string) error {
	fs := a.command("dashboard", "[-listen ADDR] [-allow-step-down] [-interval D] [-assign-sets A,B]",
		"Serves the live web page of the herd on http://ADDR/, and /api/status (the\n"+
			"status JSON), /api/events (Server-Sent Events), /metrics (Prometheus) and\n"+
			"/healthz. The page's step-down button works only with -allow-step-down;\n"+
			"-assign-sets adds a panel per item set of package assign.")
	listen := fs.String("listen", DefaultListen, "`address` to listen on (host:port)")
	allow := fs.Bool("allow-step-down", false, "enable the step-down button (POST /api/step-down)")
	interval := fs.Duration("interval", operate.DefaultInterval, "re-sync `interval`: Redis is read at least this often")
	sets := fs.String("assign-sets", "", "comma-separated `names` of assign item sets to show (assign.Config.Set)")
	r, done, err := a.open(ctx, fs, args, positive("interval", interval))
	if err != nil {
		return err
	}
	defer done()
	var assignSets []string
	if *sets != "" {
		assignSets = strings.Split(*sets, ",")
		for _, set := range assignSets {
			if err := keyspace.ValidateName("item set", set); err != nil {
				return fmt.Errorf("%w: -assign-sets: %w", operate.ErrUsage, err)
			}
		}
	}
	if _, err := a.snapshot(ctx, r); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("%w: -listen %s: %w", operate.ErrUsage, *listen, err)
	}
	d := dashboard.New(r, operate.NewWatcher(r, *interval), dashboard.Options{AllowStepDown: *allow, AssignSets: assignSets})
	fmt.Fprintf(a.stdout, "herd dashboard of %q on %s: http://%s/\n", a.lock, r.Conn().URL, ln.Addr())
	return d.Serve(ctx, ln)
}

const deadUsage = `Usage: herd [global flags] dead <list|retry|drop> [flags] [ID...]

The dead letters of durable routing: the entries a durable.Consumer gave up on
after Config.MaxDeliveries deliveries, kept in the stream <lock>:dead until
they are retried or dropped.

  dead list [-n N] [-o table|json]   the oldest N dead letters (default 100, 0 for
                                     all): id, age, inbox, type, message id,
                                     deliveries, last error
  dead retry [-to PROCESS] ID...     send each again, under the current term, to the
                                     inbox it was in or to PROCESS's; prints the
                                     new entry ids
  dead drop ID... | -all             delete them for good; prints how many were

Run 'herd dead <command> -h' for a command's flags, 'herd -h' for the global
flags and the exit statuses.
`

// dead runs herd dead list, retry or drop. Global flags may come before the
// subcommand too.
func (a *app) dead(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("herd dead", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() { fmt.Fprint(a.stderr, deadUsage) }
	a.globalFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return fmt.Errorf("%w: %w", operate.ErrUsage, err)
	}
	if fs.NArg() == 0 {
		fmt.Fprint(a.stderr, deadUsage)
		return fmt.Errorf("%w: no dead command given: list, retry or drop", operate.ErrUsage)
	}
	cmds := map[string]func(context.Context, []string) error{"list": a.deadList, "retry": a.deadRetry, "drop": a.deadDrop}
	sub := fs.Arg(0)
	if sub == "help" {
		fmt.Fprint(a.stdout, deadUsage)
		return errHelp
	}
	run, ok := cmds[sub]
	if !ok {
		return fmt.Errorf("%w: unknown dead command %q: list, retry or drop ('herd dead -h' for help)", operate.ErrUsage, sub)
	}
	a.name = "dead " + sub
	return run(ctx, fs.Args()[1:])
}

func (a *app) deadList(ctx context.Context, args []string) error {
	fs := a.command("dead list", "[-n N] [-o table|json]",
		"Lists the oldest dead letters of durable routing (the stream <lock>:dead): id,\n"+
			"age, the process whose inbox it was in, type, message id, deliveries and the\n"+
			"last error. The table cuts a long type or error, never an id; -o json has\n"+
			"everything.")
	out, checkOut := format(fs, "table", "json")
	n := fs.Int64("n", 100, "list at most `N` dead letters, oldest first (0: all)")
	r, _, done, err := a.openKnown(ctx, fs, args, checkOut, notNegative("n", n))
	if err != nil {
		return err
	}
	defer done()
	rctx, cancel := context.WithTimeout(ctx, 2*operate.DialTimeout)
	defer cancel()
	l, err := operate.ListDead(rctx, r, *n)
	if err != nil {
		return err
	}
	if *out == "json" {
		return writeJSON(a.stdout, l.Letters)
	}
	a.list(len(l.Letters), "no dead letters in "+l.Stream, func(w io.Writer) {
		deadTable(w, l.Letters)
		if shown := int64(len(l.Letters)); shown < l.Total {
			fmt.Fprintf(w, "%d of %s in %s, oldest first; -n 0 lists them all\n", shown, plural(l.Total, "dead letter"), l.Stream)
		}
	})
	return nil
}

func (a *app) deadRetry(ctx context.Context, args []string) error {
	fs := a.command("dead retry", "[-to PROCESS] ID...",
		"Sends each dead letter again: it is added, under the current term, to the\n"+
			"inbox it was in, or to the inbox of -to (a live process), with its deliveries\n"+
			"counted from zero, and deleted from the dead letters, in one atomic step.\n"+
			"Prints the new entry id of each. A dead letter that cannot be retried is\n"+
			"named on stderr with the reason, and the others are still retried. A -to\n"+
			"that names no live process fails before anything is retried.")
	to := fs.String("to", "", "add them to the inbox of this `process` (default: the inbox each was in)")
	ids, err := a.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return fmt.Errorf("%w: give the ids of the dead letters to retry (herd dead list shows them)", operate.ErrUsage)
	}
	r, _, done, err := a.known(ctx, deadIDs(ids), func() error {
		if *to == "" {
			return nil
		}
		if err := keyspace.ValidateName("-to", *to); err != nil {
			return fmt.Errorf("%w: %w", operate.ErrUsage, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer done()
	if *to != "" {
		rctx, cancel := context.WithTimeout(ctx, 2*operate.DialTimeout)
		err := operate.CheckRetryTarget(rctx, r, *to)
		cancel()
		if err != nil {
			return err
		}
	}
	var failed int
	var last error
	for _, id := range ids {
		rctx, cancel := context.WithTimeout(ctx, 2*operate.DialTimeout)
		res, err := operate.RetryDead(rctx, r, id, *to)
		cancel()
		if err != nil {
			if len(ids) == 1 {
				return err
			}
			failed, last = failed+1, err
			fmt.Fprintf(a.stderr, "herd dead retry: %v\n", err)
			continue
		}
		fmt.Fprintf(a.stdout, "%s retried to %s: entry %s\n", res.ID, res.To, res.Entry)
	}
	if failed > 0 {
		return &summaryError{msg: fmt.Sprintf("%d of %s not retried (above)", failed, plural(int64(len(ids)), "dead letter")), cause: last}
	}
	return nil
}

func (a *app) deadDrop(ctx context.Context, args []string) error {
	fs := a.command("dead drop", "ID... | -all",
		"Deletes dead letters for good: those named, or every one with -all. Prints\n"+
			"how many were dropped. An id not found is named on stderr, and the exit\n"+
			"status is then 1, though the others were dropped.")
	all := fs.Bool("all", false, "drop every dead letter (instead of naming them)")
	ids, err := a.parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case *all && len(ids) > 0:
		return fmt.Errorf("%w: give the ids of the dead letters to drop or -all, not both", operate.ErrUsage)
	case !*all && len(ids) == 0:
		return fmt.Errorf("%w: give the ids of the dead letters to drop (herd dead list shows them), or -all to drop every one", operate.ErrUsage)
	}
	r, _, done, err := a.known(ctx, deadIDs(ids))
	if err != nil {
		return err
	}
	defer done()
	rctx, cancel := context.WithTimeout(ctx, 2*operate.DialTimeout)
	defer cancel()
	if *all {
		n, err := operate.DropAllDead(rctx, r)
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "dropped %s\n", plural(n, "dead letter"))
		return nil
	}
	n, missing, err := operate.DropDead(rctx, r, ids)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		given := plural(n+int64(len(missing)), "dead letter")
		fmt.Fprintf(a.stdout, "dropped %d of %s\n", n, given)
		return fmt.Errorf("%d of %s not found in %s: %s (herd dead list shows the ids)",
			len(missing), given, r.Conn().Keys.Dead, strings.Join(missing, ", "))
	}
	fmt.Fprintf(a.stdout, "dropped %s\n", plural(n, "dead letter"))
	return nil
}

// deadIDs is the check of the dead letter ids given as arguments.
func deadIDs(ids []string) func() error {
	return func() error {
		for _, id := range ids {
			if err := operate.CheckDeadID(id); err != nil {
				return err
			}
		}
		return nil
	}
}

// notNegative is the check of an integer flag that must not be below zero.
func notNegative(flagName string, v *int64) func() error {
	return func() error {
		if *v < 0 {
			return fmt.Errorf("%w: -%s %d must not be negative", operate.ErrUsage, flagName, *v)
		}
		return nil
	}
}

// plural writes n and what, with an s unless n is 1.
func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// summaryError is an error whose message sums up failures reported one by
// one already; it wraps the last, whose exit status it takes.
type summaryError struct {
	msg   string
	cause error
}

func (e *summaryError) Error() string { return e.msg }
func (e *summaryError) Unwrap() error { return e.cause }

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// compactJSON writes v as compact JSON, or with %v when it cannot.
func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// writeStatus writes the table form of herd status.
func writeStatus(w io.Writer, s operate.Snapshot, url string) {
	fmt.Fprintf(w, "lock     %s on %s (registry backend %s)\n", s.Lock, url, s.Backend)
	if s.Cluster {
		node := s.SlotNode
		if node == "" {
			node = "a node the slot map does not name yet"
		}
		fmt.Fprintf(w, "slot     %d on %s\n", s.Slot, node)
	}
	if m := s.Master; m != nil {
		who := m.NodeID
		if m.Identifier != "" && m.Identifier != m.NodeID {
			who += " (" + escape(m.Identifier) + ")"
		}
		ttl := operate.FormatAge(m.TTL)
		if m.TTL < 0 {
			ttl = "none"
		}
		fmt.Fprintf(w, "master   %s, term %d, held %s, lock TTL %s\n", who, m.Term, operate.FormatAge(m.Held), ttl)
	} else {
		fmt.Fprintln(w, "master   none")
	}
	fmt.Fprintln(w)
	if len(s.Processes) == 0 {
		fmt.Fprintln(w, "no process registered")
	} else {
		processTable(w, s.Processes)
		fmt.Fprintf(w, "each process receives its messages on the channel %s<PROCESS>\n", keyspace.DefaultSlavePrefix)
	}
	if len(s.Warnings) > 0 {
		fmt.Fprintln(w, "\nwarnings:")
		for _, msg := range s.Warnings {
			wrap(w, msg, "  - ", "    ", Width)
		}
	}
}

// wrap writes text as lines of at most width runes, the first after
// first, the others after indent.
func wrap(w io.Writer, text, first, indent string, width int) {
	line, prefix := "", first
	for _, word := range strings.Fields(text) {
		if line != "" && len([]rune(prefix+line+" "+word)) > width {
			fmt.Fprintln(w, prefix+line)
			line, prefix = "", indent
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	fmt.Fprintln(w, prefix+line)
}

// assignments runs herd assignments: the items of one item set of package
// assign, per item and per slave.
func (a *app) assignments(ctx context.Context, args []string) error {
	fs := a.command("assignments", "[-set NAME] [-o table|json]",
		"Lists the items of an assign item set (keys <lock>:assign:<set>:...): the slave\n"+
			"the master's plan gives each, the slave that owns it now and for how long\n"+
			"without a renewal, and its state: owned, moving (another slave still owns\n"+
			"it), waiting (not claimed yet), unassigned (no slave had room) or removed\n"+
			"(no longer in the set, still owned); then each slave's planned and owned\n"+
			"counts. A set none of whose keys exists exits with status 7, as an unknown\n"+
			"lock does, naming the sets that have items.")
	out, checkOut := format(fs, "table", "json")
	set := fs.String("set", "items", "the item set's `name` (assign.Config.Set)")
	r, done, err := a.open(ctx, fs, args, checkOut)
	if err != nil {
		return err
	}
	defer done()
	rctx, cancel := context.WithTimeout(ctx, 2*operate.DialTimeout)
	defer cancel()
	as, err := operate.ReadAssignments(rctx, r, *set)
	if err != nil {
		return err
	}
	if !as.Known {
		// An unknown lock is named as herd status names it; a known one
		// with no such set lists the sets it has.
		if _, err := a.snapshot(ctx, r); err != nil {
			return err
		}
		return operate.UnknownSet(rctx, r, *set)
	}
	if *out == "json" {
		return writeJSON(a.stdout, as)
	}
	a.list(len(as.Items), "no items in set "+as.Set, func(w io.Writer) { assignTable(w, as) })
	return nil
}
