package client

import (
	"time"

	"github.com/nats-io/nats.go"
)

// PingInterval and MaxPingsOut say how soon a connection notices a NATS
// server that stopped answering while its TCP connection stays open (a node
// frozen, as with SIGSTOP, or a host that hangs): the connection pings every
// PingInterval and is taken for stale, and reconnected to another server of
// the cluster, when more than MaxPingsOut pings are unanswered: 6 to 8 s
// after the server stopped. nats.go's defaults (2 minutes, 2) leave such a
// connection waiting 4 to 6 minutes, or until the server resumes. JetStream
// itself needs 4 to 9 s to elect a new leader after a node is lost, so a
// shorter bound would gain little; a longer one would leave the work on a
// frozen node's connections idle after the cluster recovered. A server
// answers a ping at once, from the connection's read loop, so only a
// machine starved of CPU for seconds delays a pong that long; a connection
// taken for stale wrongly reconnects, and Rath's requests are retried.
const (
	PingInterval = 2 * time.Second
	MaxPingsOut  = 3
)

// KeepAlive returns the nats.go options of PingInterval and MaxPingsOut:
// Rath's services, its CLI and its test servers' connections use them, and
// so should a program that serves tools or follows sessions on a cluster.
func KeepAlive() []nats.Option {
	return []nats.Option{nats.PingInterval(PingInterval), nats.MaxPingsOutstanding(MaxPingsOut)}
}
