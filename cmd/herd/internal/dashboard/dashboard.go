// Package dashboard serves the live web page of herd dashboard: the master
// with its term and time held, a timeline of masterships and failovers, the
// processes with their heartbeat age, the number of dead letters of durable
// routing, the recent events, and a step-down button; plus /api/status (the
// status JSON), /api/events (the page's Server-Sent Events),
// /api/step-down, /metrics and /healthz.
//
// The page is plain HTML, CSS and JavaScript embedded in the binary. It
// reads nothing from Redis itself: one operate.Watcher, the same as herd
// watch, feeds every page through Server-Sent Events.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/herdkit/herd/cmd/herd/internal/operate"
)

//go:embed web
var webFiles embed.FS

// Options configure a Dashboard.
type Options struct {
	// AllowStepDown enables POST /api/step-down and the page's button.
	// Default false: the button is disabled and the server refuses.
	AllowStepDown bool
	// StepDownTimeout bounds a step-down's wait for the new master.
	// Default: operate.DefaultStepDownTimeout.
	StepDownTimeout time.Duration
	// Events is how many recent events the page shows. Default 100.
	Events int
	// Masterships is how many masterships the timeline keeps. Default 50.
	Masterships int
	// AssignSets names item sets of package assign the page shows, each
	// with its items by state and every slave's planned and owned counts.
	// Default none.
	AssignSets []string
}

// Dashboard is the web page of one lock name and the watcher that feeds it.
// Its handler is safe for concurrent use.
type Dashboard struct {
	reader  *operate.Reader
	watcher *operate.Watcher
	opts    Options
	hub     *hub
	metrics *prometheus.Registry
	mux     *http.ServeMux
}

// New returns the dashboard of r's lock, fed by w (which reads through r).
func New(r *operate.Reader, w *operate.Watcher, o Options) *Dashboard {
	if o.StepDownTimeout <= 0 {
		o.StepDownTimeout = operate.DefaultStepDownTimeout
	}
	if o.Events <= 0 {
		o.Events = 100
	}
	if o.Masterships <= 0 {
		o.Masterships = 50
	}
	r.WatchAssignments(o.AssignSets...)
	d := &Dashboard{reader: r, watcher: w, opts: o, metrics: prometheus.NewRegistry(), mux: http.NewServeMux()}
	d.hub = newHub(r.Conn(), o, w.Interval())
	d.metrics.MustRegister(newCollector(d.hub))

	static, err := fs.Sub(webFiles, "web")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	files := http.FileServerFS(static)
	d.mux.Handle("GET /", noCache(files))
	d.mux.HandleFunc("GET /api/status", d.status)
	d.mux.HandleFunc("GET /api/events", d.events)
	d.mux.HandleFunc("POST /api/step-down", d.stepDown)
	d.mux.HandleFunc("GET /healthz", d.healthz)
	d.mux.Handle("GET /metrics", promhttp.HandlerFor(d.metrics, promhttp.HandlerOpts{}))
	return d
}

// Handler returns the dashboard's HTTP handler.
func (d *Dashboard) Handler() http.Handler { return securityHeaders(d.mux) }

// Run runs the watcher until ctx ends, feeding the pages. It returns the
// watcher's error (a failed start), or nil when ctx ends.
func (d *Dashboard) Run(ctx context.Context) error {
	return d.watcher.Run(ctx, d.hub.update)
}

// Serve runs the watcher and serves the dashboard on ln until ctx ends,
// then shuts the server down (the event streams end with ctx).
func (d *Dashboard) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	err := d.Run(ctx)
	cancel()
	sctx, stop := context.WithTimeout(context.Background(), 3*time.Second)
	defer stop()
	_ = srv.Shutdown(sctx)
	if serr := <-served; err == nil && !errors.Is(serr, http.ErrServerClosed) {
		err = serr
	}
	return err
}

func (d *Dashboard) status(w http.ResponseWriter, _ *http.Request) {
	snap, ok := d.hub.snapshot()
	if !ok {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "no read of Redis yet"})
		return
	}
	writeJSON(w, http.StatusOK, snap)
}

// events streams the page's model as Server-Sent Events: one "model" event
// now and after every read of Redis, and a comment every 15 seconds to keep
// proxies from closing the stream.
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	models, unsubscribe := d.hub.subscribe()
	defer unsubscribe()
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case m := <-models:
			if _, err := fmt.Fprintf(w, "event: model\ndata: %s\n\n", m); err != nil {
				return
			}
		case <-keepAlive.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
		}
		flusher.Flush()
	}
}

// stepDownAnswer is the reply of POST /api/step-down.
type stepDownAnswer struct {
	OK     bool                    `json:"ok"`
	Result *operate.StepDownResult `json:"result,omitempty"`
	Error  string                  `json:"error,omitempty"`
	Exit   int                     `json:"exitCode"`
}

// stepDown asks the master to hand over, as herd step-down does. It needs
// -allow-step-down, a JSON body {"to":"<node id or empty>"}, and, when the
// browser sends an Origin, this server's own: a page of another site cannot
// make a visitor's browser post it.
func (d *Dashboard) stepDown(w http.ResponseWriter, r *http.Request) {
	if !d.opts.AllowStepDown {
		writeJSON(w, http.StatusForbidden, stepDownAnswer{Error: "step-down is disabled: start herd dashboard with -allow-step-down", Exit: operate.ExitUsage})
		return
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			writeJSON(w, http.StatusForbidden, stepDownAnswer{Error: "cross-origin request refused", Exit: operate.ExitUsage})
			return
		}
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		writeJSON(w, http.StatusUnsupportedMediaType, stepDownAnswer{Error: "the body must be JSON (Content-Type: application/json)", Exit: operate.ExitUsage})
		return
	}
	var req struct {
		To string `json:"to"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, stepDownAnswer{Error: "bad request body: " + err.Error(), Exit: operate.ExitUsage})
		return
	}
	res, err := operate.StepDown(r.Context(), d.reader, req.To, d.opts.StepDownTimeout)
	ans := stepDownAnswer{OK: err == nil, Exit: operate.ExitCode(err)}
	if res.To != "" {
		ans.Result = &res
	}
	code := http.StatusOK
	if err != nil {
		ans.Error = err.Error()
		code = http.StatusConflict
		switch ans.Exit {
		case operate.ExitUsage:
			code = http.StatusBadRequest
		case operate.ExitTimeout:
			code = http.StatusGatewayTimeout
		case operate.ExitUnreachable, operate.ExitAuth, operate.ExitACL, operate.ExitError:
			code = http.StatusBadGateway
		}
	}
	writeJSON(w, code, ans)
}

// healthz answers 200 while the last read of Redis succeeded and is recent
// (three intervals and five seconds), else 503 with the reason.
func (d *Dashboard) healthz(w http.ResponseWriter, _ *http.Request) {
	ok, age, msg := d.hub.health()
	body := map[string]any{"status": "ok", "lastReadMs": age.Milliseconds()}
	code := http.StatusOK
	if !ok {
		body["status"], body["error"] = "failing", msg
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// securityHeaders keeps the page from loading anything but its own files
// and from being framed by another site.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}
