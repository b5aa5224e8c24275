package operate

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/herdkit/herd/keyspace"
)

// Topology names the kind of deployment a URL points to.
type Topology string

// The topologies Dial connects to.
const (
	TopologyServer   Topology = "server"   // one server (redis://, rediss://, unix://)
	TopologySentinel Topology = "sentinel" // a Sentinel deployment (master_name=... in the query)
	TopologyCluster  Topology = "cluster"  // a Redis Cluster (redis+cluster://, or addr=... in the query)
)

// Conn is a connection to the Redis of a herd and the names of one lock.
// It is safe for concurrent use; Close it when done.
type Conn struct {
	// Client is the Redis client, with ContextTimeoutEnabled set.
	Client redis.UniversalClient
	// Keys are the lock's key and channel names, hash-tagged on a Cluster.
	Keys keyspace.Keys
	// Lock is the lock name.
	Lock string
	// URL is the URL dialled, with its password hidden.
	URL string
	// Topology is the kind of deployment URL names.
	Topology Topology
}

// Close closes the client.
func (c *Conn) Close() error { return c.Client.Close() }

// quiet is a go-redis logger that drops everything: the herd command
// reports errors itself, and go-redis's own lines (a failed dial, say)
// would only repeat them on stderr.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

var silence sync.Once

// DialTimeout bounds Dial's first round trip; calls after it are bounded by
// their callers' contexts.
const DialTimeout = 5 * time.Second

// Dial connects to rawURL for the lock name lock and checks with a PING that
// the server answers. The URL is one of go-redis's forms:
//
//	redis://[user:password@]host:port[/db][?option=value...]   one server
//	rediss://...                                                 the same over TLS
//	unix:///path/to/redis.sock[?db=n]                            a Unix socket
//	redis://host:port?master_name=NAME&addr=host2:port2...       Sentinel (the addresses are sentinels')
//	redis+cluster://host:port[?addr=host2:port2...]              Cluster (also redis://...?addr=...)
//	host:port                                                    short for redis://host:port
//
// Errors wrap ErrUsage (bad lock name), ErrBadURL, ErrUnreachable, ErrAuth
// or ErrACL.
//
// Dial turns off go-redis's logging, for the whole process.
func Dial(ctx context.Context, rawURL, lock string) (*Conn, error) {
	silence.Do(func() { redis.SetLogger(quiet{}) })
	if err := keyspace.ValidateName("lock name", lock); err != nil {
		return nil, fmt.Errorf("%w: -lock: %w", ErrUsage, err)
	}
	client, topo, shown, err := newClient(rawURL)
	if err != nil {
		return nil, err
	}
	_, cluster := client.(*redis.ClusterClient)
	c := &Conn{Client: client, Keys: keyspace.NewKeys(lock, cluster), Lock: lock, URL: shown, Topology: topo}
	pctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		_ = client.Close()
		return nil, Classify("connect to "+shown, err)
	}
	return c, nil
}

// newClient parses rawURL and makes its client. shown is the URL with the
// password hidden.
func newClient(rawURL string) (client redis.UniversalClient, topo Topology, shown string, err error) {
	raw := strings.TrimSpace(rawURL)
	if raw == "" {
		return nil, "", "", fmt.Errorf("%w: -redis is empty", ErrBadURL)
	}
	if !strings.Contains(raw, "://") {
		raw = "redis://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", "", fmt.Errorf("%w: %w", ErrBadURL, hidePassword(err, rawURL))
	}
	shown = u.Redacted()
	bad := func(err error) (redis.UniversalClient, Topology, string, error) {
		return nil, "", "", fmt.Errorf("%w %s: %w", ErrBadURL, shown, hidePassword(err, rawURL))
	}
	q := u.Query()
	switch {
	case u.Scheme == "redis+cluster" || u.Scheme == "rediss+cluster":
		u.Scheme = strings.TrimSuffix(u.Scheme, "+cluster")
		fallthrough
	case q.Has("addr") && !q.Has("master_name"):
		opts, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return bad(err)
		}
		herdSettings(&opts.ContextTimeoutEnabled, &opts.DisableIdentity, &opts.MaintNotificationsConfig)
		// A failed master sends no MOVED: without a reload the client
		// keeps asking it until go-redis's 60 s default reload, and watch
		// and status see a failover that late.
		opts.ClusterStateReloadInterval = ClusterStateReloadInterval
		return redis.NewClusterClient(opts), TopologyCluster, shown, nil
	case q.Has("master_name"):
		opts, err := redis.ParseFailoverURL(u.String())
		if err != nil {
			return bad(err)
		}
		if opts.MasterName == "" {
			return bad(fmt.Errorf("master_name is empty"))
		}
		herdSettings(&opts.ContextTimeoutEnabled, &opts.DisableIdentity, nil) // a failover client has no maintenance notifications
		return redis.NewFailoverClient(opts), TopologySentinel, shown, nil
	}
	opts, err := redis.ParseURL(u.String())
	if err != nil {
		return bad(err)
	}
	herdSettings(&opts.ContextTimeoutEnabled, &opts.DisableIdentity, &opts.MaintNotificationsConfig)
	return redis.NewClient(opts), TopologyServer, shown, nil
}

// herdSettings sets, in the options of a client of any topology, what herd
// needs: ContextTimeoutEnabled (herd's deadlines only hold with it), no
// CLIENT SETINFO, and no maintenance notifications (not every server has
// them) unless maint is nil.
func herdSettings(contextTimeout, disableIdentity *bool, maint **maintnotifications.Config) {
	*contextTimeout, *disableIdentity = true, true
	if maint != nil {
		*maint = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
}

// ClusterStateReloadInterval is how often herd's commands reload a Redis
// Cluster's slot map (the setting docs/topologies.md recommends), so that
// they follow a failover of herd's slot within about that long.
const ClusterStateReloadInterval = time.Second

// userinfo matches the user information of a URL, to hide its password.
var userinfo = regexp.MustCompile(`(://[^:/@]*:)[^@]*@`)

// hidePassword returns err with the password of rawURL, if any, replaced,
// so that no message repeats it, even of a URL that does not parse.
func hidePassword(err error, rawURL string) error {
	m := userinfo.FindStringSubmatchIndex(rawURL)
	if m == nil {
		return err
	}
	pw := rawURL[m[3] : m[1]-1]
	if pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
}
