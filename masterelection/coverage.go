package masterelection

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterPromotion is what a Redis Cluster failover takes beyond
// cluster-node-timeout: the replica's election delay (500 ms plus up to
// 500 ms at random) and its vote.
const clusterPromotion = time.Second

// coverageRead is what readFullCoverage found on the Cluster node that holds
// the election's keys: its cluster-require-full-coverage and
// cluster-node-timeout, or why they were not read.
type coverageRead struct {
	cluster     bool // the client is a *redis.ClusterClient
	addr        string
	full        bool
	nodeTimeout time.Duration
	err         error
}

// aclConfigGet asks, without running it, whether the user may run CONFIG
// GET: a refused CONFIG GET would be written to the ACL LOG of a
// least-privileged user's server at every Start.
var aclConfigGet = redis.NewScript(`if not redis.acl_check_cmd then return 1 end
if redis.acl_check_cmd('config', 'get', 'cluster-node-timeout') then return 1 end
return 0`)

// readFullCoverage reads, on a Redis Cluster, the node that holds the
// election's keys' cluster-require-full-coverage and cluster-node-timeout,
// when the user may read them (two round trips, at Start only).
func (n *node) readFullCoverage(ctx context.Context) coverageRead {
	cl, ok := n.client.(*redis.ClusterClient)
	if !ok {
		return coverageRead{}
	}
	ctx, cancel := context.WithTimeout(ctx, n.opTimeout())
	defer cancel()
	node, err := cl.MasterForKey(ctx, n.keys.Master)
	if err != nil {
		return coverageRead{cluster: true, err: fmt.Errorf("find the cluster node of %s: %w", n.keys.Master, err)}
	}
	r := coverageRead{cluster: true, addr: node.Options().Addr}
	allowed, err := aclConfigGet.Run(ctx, node, nil).Int()
	if err != nil || allowed != 1 {
		r.err = fmt.Errorf("CONFIG GET is not allowed to this user")
		if err != nil {
			r.err = fmt.Errorf("ask whether CONFIG GET is allowed: %w", err)
		}
		return r
	}
	vals, err := node.ConfigGet(ctx, "cluster-*").Result()
	if err != nil {
		r.err = fmt.Errorf("CONFIG GET cluster-*: %w", err)
		return r
	}
	ms, err := strconv.ParseInt(vals["cluster-node-timeout"], 10, 64)
	if err != nil {
		r.err = fmt.Errorf("CONFIG GET cluster-node-timeout: %q is not a number of milliseconds", vals["cluster-node-timeout"])
		return r
	}
	r.full, r.nodeTimeout = vals["cluster-require-full-coverage"] == "yes", time.Duration(ms)*time.Millisecond
	return r
}

// reportCoverage warns, with an error event wrapping ErrClusterCoverage,
// when a failover of any master of the Cluster could make the election's
// slot refuse commands (CLUSTERDOWN, with cluster-require-full-coverage
// yes) for longer than the master can go without renewing before it steps
// down. The refusal lasts from when the cluster marks the failed master
// failed (about cluster-node-timeout after the failure) until a replica is
// promoted; the check compares cluster-node-timeout + clusterPromotion, a
// margin above that, with LockTTL - StepDownMargin. It never fails Start.
func (n *node) reportCoverage(r coverageRead) {
	if !r.cluster {
		return
	}
	log := n.log.With().Str("redis", r.addr).Logger()
	if r.err != nil {
		log.Info().Err(r.err).Msg("cluster-require-full-coverage not checked: with yes, a failover of any master can make the lock's slot refuse commands (docs/topologies.md)")
		return
	}
	window := n.cfg.LockTTL - n.cfg.StepDownMargin
	down := r.nodeTimeout + clusterPromotion
	if !r.full || window > down {
		return
	}
	err := fmt.Errorf("%w: cluster-require-full-coverage yes on %s and cluster-node-timeout %v: when any master fails, every node refuses commands (CLUSTERDOWN) "+
		"from when the cluster marks it failed until a replica is promoted (the replica waits 0.5 to 1 s, more by its rank, before it asks for votes; with no replica, until the master returns), "+
		"and a refusal longer than LockTTL - StepDownMargin = %v makes the master step down although its own node is healthy; "+
		"set cluster-require-full-coverage no on every node and persist it (CONFIG REWRITE or the config file), or LockTTL above %v (cluster-node-timeout + 1s + StepDownMargin) (docs/topologies.md)",
		ErrClusterCoverage, r.addr, r.nodeTimeout, window, down+n.cfg.StepDownMargin)
	log.Warn().Err(err).Msg("a failover elsewhere in the cluster can end the mastership")
	// Not emitError: like the eviction warning, no failed attempt.
	n.bus.emit(topicError, payload{err: err})
}
