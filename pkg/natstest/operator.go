package natstest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
)

// Operator is a server in operator mode (decentralized auth, as an existing
// NATS deployment runs it): trusted operator JWT, a system account, and the
// account Rath runs in (auth.Account) with JetStream, all held in a memory
// account resolver; users are minted by the test with the account's key
// and written as standard NATS user credentials files.
type Operator struct {
	Server *server.Server
	// Account is the public key of Rath's account.
	Account string
	dir     string
	account nkeys.KeyPair
}

// StartOperator runs a server in operator mode for the test, shut down when
// it ends. Mint users with Creds or CredsFile.
func StartOperator(t testing.TB) *Operator {
	t.Helper()
	op, err := nkeys.CreateOperator()
	if err != nil {
		t.Fatal(err)
	}
	opPub, _ := op.PublicKey()
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "natstest"
	sys, sysJWT := account(t, op, "SYS", false)
	sysPub, _ := sys.PublicKey()
	oc.SystemAccount = sysPub
	if _, err := oc.Encode(op); err != nil {
		t.Fatalf("operator JWT: %v", err)
	}
	acc, accJWT := account(t, op, auth.Account, true)
	resolver := &server.MemAccResolver{}
	accPub, _ := acc.PublicKey()
	if err := resolver.Store(sysPub, sysJWT); err != nil {
		t.Fatal(err)
	}
	if err := resolver.Store(accPub, accJWT); err != nil {
		t.Fatal(err)
	}
	opts := &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: t.TempDir(),
		MaxPayload: 8 << 20,
		// A worker's user JWT carries its role's whole table (about 9 KB);
		// the CONNECT line holding it exceeds the default 4 KB limit
		// (deploy/nats-operator/README.md).
		MaxControlLine:   auth.MaxControlLine,
		TrustedOperators: []*jwt.OperatorClaims{oc},
		SystemAccount:    sysPub,
		AccountResolver:  resolver,
		NoLog:            true, NoSigs: true,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("operator-mode server: %v", err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("operator-mode server not ready")
	}
	return &Operator{Server: ns, Account: accPub, dir: t.TempDir(), account: acc}
}

// account creates an account signed by op, with unlimited JetStream if js.
func account(t testing.TB, op nkeys.KeyPair, name string, js bool) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	ac := jwt.NewAccountClaims(pub)
	ac.Name = name
	if js {
		ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	}
	token, err := ac.Encode(op)
	if err != nil {
		t.Fatalf("account %s JWT: %v", name, err)
	}
	return kp, token
}

// Creds mints a user of Rath's account acting as p in role, with the
// role's permissions (auth.UserClaims: the table deploy/nats-operator's
// templates come from), edited by edit if given, and returns the content
// of its NATS user credentials file.
func (o *Operator) Creds(t testing.TB, role auth.Role, p events.Principal, edit ...func(*jwt.UserClaims)) []byte {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	c := auth.UserClaims(pub, role, p)
	for _, e := range edit {
		e(c)
	}
	token, err := c.Encode(o.account)
	if err != nil {
		t.Fatalf("user JWT of %s: %v", p, err)
	}
	b, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// CredsFile is Creds written to a file (mode 0600) named name.creds in a
// directory of the test's; it returns the path.
func (o *Operator) CredsFile(t testing.TB, name string, role auth.Role, p events.Principal, edit ...func(*jwt.UserClaims)) string {
	t.Helper()
	path := filepath.Join(o.dir, name+".creds")
	if err := os.WriteFile(path, o.Creds(t, role, p, edit...), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// URL is the server's client URL.
func (o *Operator) URL() string { return o.Server.ClientURL() }
