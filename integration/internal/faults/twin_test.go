package faults

import (
	"strings"
	"testing"
	"time"
)

// twinRec is a record of the twin "b-twin7", which runs under b's node id.
func twinRec(kind Kind, detail string, at int64) Record {
	return Record{T: at * ms, Proc: "b-twin7", Node: "b", Kind: kind, Detail: detail}
}

func TestTwinCheck(t *testing.T) {
	// a is master throughout, b a slave; the twin of b starts at 1000 ms
	// (fault 1) and the fault heals at 4000 ms.
	spawn := func(at int64) Record {
		r := harness(KindSpawn, 0, TwinOf+"b", "b-twin7", at)
		r.Node = "b"
		return r
	}
	dead := func(at int64) Record {
		r := harness(KindDead, 0, "exited 0", "b-twin7", at)
		r.Node = "b"
		return r
	}
	h := history{harness(KindSpawn, 0, "", "a", 0), harness(KindSpawn, 0, "", "b", 0), start("a", 0), start("b", 0),
		call("a", 1), acquired("a", 10, 2)}
	for at := int64(250); at < 6000; at += 250 {
		h = append(h, call("a", at))
	}
	h = append(h, lost("a", 10, 6000), harness(KindFault, 1, FaultTwin, "b", 1000), spawn(1000), harness(KindHeal, 1, FaultTwin, "b", 4000))
	refused := h.with(twinRec(KindTwinRefused, "masterelection: duplicate node id", 2200), dead(2210))
	params := testParams
	params.Slack = time.Second
	bound := params.TwinBound()
	tests := []struct {
		name  string
		h     history
		wants []string
		check func(t *testing.T, r Report)
	}{
		{name: "refused in time", h: refused, check: func(t *testing.T, r Report) {
			if r.Twins.Started != 1 || r.Twins.Refused != 1 || r.Twins.MaxRefusal != 1200*time.Millisecond || r.Judged["twin"] != 1 {
				t.Errorf("twins %+v judged %v", r.Twins, r.Judged)
			}
		}},
		{
			name:  "refused late",
			h:     h.with(twinRec(KindTwinRefused, "", 1000+bound.Milliseconds()+1), dead(1000+bound.Milliseconds()+5)),
			wants: []string{"twin: twin b-twin7 of b (node id b) was refused 2.451s after its spawn, bound 2.45s"},
		},
		{
			name:  "never refused",
			h:     h.with(harness(KindNote, 0, "", "", 5000)),
			wants: []string{"ran 5s without its Start being refused"},
		},
		{
			name: "stopped before its refusal was due",
			h:    h.with(twinRec(KindStopping, "", 1500), dead(1510), harness(KindNote, 0, "", "", 5000)),
			check: func(t *testing.T, r Report) {
				if r.Twins.Stopped != 1 || r.Twins.Refused != 0 {
					t.Errorf("twins %+v", r.Twins)
				}
			},
		},
		{
			name:  "a twin that started",
			h:     refused.with(twinRec(KindReady, "slave", 1500)),
			wants: []string{"twin b-twin7 of b (node id b): its Start returned, with b alive and undisturbed"},
		},
		{
			name: "a twin that worked an item before its refusal",
			h:    refused.with(Record{T: 1800 * ms, Proc: "b-twin7", Node: "b", Kind: KindItemLive, Seq: 1, Detail: "i1"}),
			wants: []string{"was refused, but recorded item-live (i1) 800ms after its spawn, before the refusal",
				"recorded item-live (i1) 800ms after its spawn, with b alive and undisturbed"},
		},
		{
			name:  "the peer stepped aside",
			h:     refused.with(rec("b", KindSteppedAside, 0, 0, "", 2300)),
			wants: []string{"twin: b stepped aside for its twin b-twin7 (node id b) 1.3s after the twin's spawn, with no fault on it or Redis"},
		},
		{
			name: "the peer stepped aside after Redis was paused: lenient",
			h: h.with(harness(KindFault, 2, FaultRedisPause, "", 1100), harness(KindHeal, 2, FaultRedisPause, "", 2500),
				twinRec(KindReady, "slave", 2700), rec("b", KindSteppedAside, 0, 0, "", 2800), twinRec(KindStopping, "", 4000), dead(4010)),
			check: func(t *testing.T, r Report) {
				if r.Twins.Lenient != 1 || r.Twins.PeerAside != 1 {
					t.Errorf("twins %+v", r.Twins)
				}
			},
		},
		{
			name: "two processes under one node id with items live at once",
			h: refused.with(itemLive("b", "i1", 1, 3000), itemDone("b", "i1", 1, 3_500_000, 3_501_000),
				Record{T: 3200 * ms, Proc: "b-twin9", Node: "b", Kind: KindItemLive, Seq: 1, Detail: "i2"}),
			wants: []string{"twin: node id b: b had item i1 live (lost) while b-twin9 had item i2 live, for 300.001ms"},
		},
		{
			name: "the master's twin: the master's mastership ends while it runs",
			h: history{harness(KindSpawn, 0, "", "a", 0), start("a", 0), call("a", 1), acquired("a", 10, 2), call("a", 250),
				harness(KindFault, 1, FaultTwin, "a", 300), func() Record { r := spawn(300); r.Detail = TwinOf + "a"; return r }(),
				call("a", 500), lost("a", 10, 600), twinRec(KindTwinRefused, "", 1500), dead(1510)},
			wants: []string{"twin: a's mastership (term 10) ended 300ms after its twin b-twin7 (node id b) started"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(tt.h, params)
			var got []string
			for _, v := range r.Violations {
				if v.Check == "twin" {
					got = append(got, v.String())
				}
			}
			for _, w := range tt.wants {
				found := false
				for _, g := range got {
					found = found || strings.Contains(g, w)
				}
				if !found {
					t.Errorf("no violation %q in %q", w, got)
				}
			}
			if len(tt.wants) == 0 && len(got) > 0 {
				t.Errorf("violations %q, want none", got)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}
