package store

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// watchStreams numbers the etcd watches started, each on a gRPC stream of its own.
var watchStreams atomic.Int64

// Watch implements Store. A watch that has heard nothing for the quiet time (half the
// request timeout) asks etcd for a progress notification, and one that hears nothing for
// as long again is cut off - its member frozen, or the path to it dropping everything
// without closing the connection: it starts again, after the last revision delivered, on
// a stream of its own (Health has steered new streams to the members that answer). Silence
// alone cannot tell "nothing changed" from "cut off"; an unanswered question can.
func (s *Etcd) Watch(ctx context.Context, from int64) <-chan Event {
	out := make(chan Event, 64)
	quiet := max(s.Timeout/2, time.Second)
	go func() {
		defer close(out)
		var wc clientv3.WatchChan
		var wctx context.Context
		stopWatch := context.CancelFunc(func() {})
		watch := func() { // (re)starts the etcd watch after the last revision delivered
			stopWatch()
			wctx, stopWatch = context.WithCancel(metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx),
				"kuma-watch", strconv.FormatInt(watchStreams.Add(1), 10)))
			wc = s.c.Watch(wctx, s.prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(from+1), clientv3.WithProgressNotify())
		}
		watch()
		defer func() { stopWatch() }()
		heard := time.NewTimer(quiet)
		defer heard.Stop()
		asked := false // a progress notification was asked for since the last answer
		for {
			select {
			case <-ctx.Done():
				return
			case <-heard.C:
				if !asked {
					go func(wctx context.Context) { _ = s.c.RequestProgress(wctx) }(wctx)
				} else {
					watch()
				}
				asked = !asked
				heard.Reset(quiet)
			case wr, ok := <-wc:
				if ok {
					asked = false
					heard.Reset(quiet)
				}
				if !ok && s.c.Ctx().Err() != nil {
					return // the client is closed
				}
				if ok && (wr.CompactRevision != 0 || errors.Is(wr.Err(), rpctypes.ErrCompacted)) {
					send(ctx, out, Event{Type: Relist, Revision: wr.CompactRevision})
					return
				}
				// Closed or cancelled without our context ending (etcd's client gave the watch
				// up: a member killed, a leader lost), or failed: the watch is not over for
				// its reader, so it starts again.
				if !ok || wr.Canceled || wr.Err() != nil {
					// No leader (quorum lost) or another failure: restart the watch from the
					// last revision delivered, after a pause; nothing is missed.
					select {
					case <-ctx.Done():
						return
					case <-time.After(200 * time.Millisecond):
					}
					watch()
					continue
				}
				for _, ev := range wr.Events {
					e, ok := s.event(ev)
					if ok && !send(ctx, out, e) {
						return
					}
					from = ev.Kv.ModRevision
				}
			}
		}
	}()
	return out
}

// event is an etcd event as a store Event; false for a key that holds no resource.
func (s *Etcd) event(ev *clientv3.Event) (Event, bool) {
	e := Event{Revision: ev.Kv.ModRevision}
	if ev.Type == clientv3.EventTypeDelete {
		k, err := s.keyOf(string(ev.Kv.Key))
		if err != nil {
			return e, false // no resource's key: nothing to delete
		}
		e.Type, e.Item = Delete, Item{Key: k, Version: ev.Kv.ModRevision}
		return e, true
	}
	it, err := s.parse(string(ev.Kv.Key), ev.Kv.Value, ev.Kv.ModRevision)
	if err != nil {
		s.skip(string(ev.Kv.Key), ev.Kv.ModRevision, err)
		return e, false
	}
	e.Type, e.Item = Put, it
	return e, true
}

func send(ctx context.Context, out chan<- Event, e Event) bool {
	select {
	case out <- e:
		return true
	case <-ctx.Done():
		return false
	}
}
