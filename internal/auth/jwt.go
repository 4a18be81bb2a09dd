package auth

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/openrath/rath/pkg/events"
)

// A NATS user credentials file, as nsc and the nats CLI write it for a
// server in operator mode (decentralized auth), holds a user JWT and its
// nkey seed. Rath reads one wherever it reads its own nkey seed files; the
// role and principal it acts as come from a tag of the JWT, since Rath's
// header line is not there (ADR 0013, amendment).

// PrincipalTag prefixes the tag of a user JWT naming the Rath principal the
// user acts as: rath-principal:<tenant>/<user> for a tenant's user (role
// client), rath-principal:rath/<role> for a service or admin.
const PrincipalTag = "rath-principal:"

// MaxControlLine is the max_control_line a NATS server in operator mode
// needs for Rath's users: a service's user JWT carries its role's whole
// permission table (about 9 KB for a worker), and the client sends it in
// its CONNECT line, which the server limits to 4 KB by default. A test
// keeps every role's JWT within half of it.
const MaxControlLine = 32 << 10

// jwtBegin starts the user JWT block of a NATS credentials file.
const jwtBegin = "-----BEGIN NATS USER JWT-----"

// IsUserJWTFile reports whether b is a NATS user credentials file (a user
// JWT and its seed) rather than one of Rath's nkey seed files.
func IsUserJWTFile(b []byte) bool { return bytes.Contains(b, []byte(jwtBegin)) }

// ErrNoPrincipalTag is returned (wrapped, with the file's name) for a NATS
// user credentials file whose JWT names no Rath principal.
var ErrNoPrincipalTag = errors.New("the user JWT names no Rath principal")

// userJWT is a NATS user credentials file read and checked: its identity,
// the JWT, and the seed (to be wiped by the caller).
type userJWT struct {
	id    Identity
	token string
	seed  []byte
}

// readUserJWT checks a NATS user credentials file: the JWT decodes and its
// signature verifies, it has not expired (nor is it not yet valid), the
// seed is the JWT's user's, and a tag names the principal. name says where
// the file came from in errors. now is the time the expiry is judged at.
func readUserJWT(b []byte, name string, now time.Time) (userJWT, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w %s: %s", ErrBadCredentials, name, fmt.Sprintf(format, a...))
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return userJWT{}, bad("the user JWT: %v", err)
	}
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return userJWT{}, bad("the user JWT does not decode (garbled, or not signed by its issuer): %v", err)
	}
	if claims.Expires != 0 && now.Unix() >= claims.Expires {
		return userJWT{}, bad("the user JWT of %s expired at %s: mint a new one (nsc edit user --expiry)", claims.Name, time.Unix(claims.Expires, 0).UTC().Format(time.RFC3339))
	}
	if claims.NotBefore != 0 && now.Unix() < claims.NotBefore {
		return userJWT{}, bad("the user JWT of %s is not valid before %s", claims.Name, time.Unix(claims.NotBefore, 0).UTC().Format(time.RFC3339))
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return userJWT{}, bad("the user nkey seed: %v", err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return userJWT{}, bad("the user nkey seed: %v", err)
	}
	if pub != claims.Subject {
		return userJWT{}, bad("the seed is of user %s, the JWT is of user %s: the file pairs a JWT with another user's seed", pub, claims.Subject)
	}
	role, p, err := jwtPrincipal(claims)
	if err != nil {
		return userJWT{}, fmt.Errorf("%w %s: %w", ErrBadCredentials, name, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return userJWT{}, bad("the user nkey seed: %v", err)
	}
	return userJWT{
		id:    Identity{Role: role, Principal: p, PublicKey: pub, JWT: true},
		token: token,
		// A copy: Seed returns the key pair's own bytes, which the deferred
		// Wipe overwrites.
		seed: bytes.Clone(seed),
	}, nil
}

// jwtPrincipal reads the role and principal a user JWT's tag names.
func jwtPrincipal(c *jwt.UserClaims) (Role, events.Principal, error) {
	var named []string
	for _, tag := range c.Tags {
		if v, ok := strings.CutPrefix(tag, PrincipalTag); ok {
			named = append(named, v)
		}
	}
	switch len(named) {
	case 0:
		return "", events.Principal{}, fmt.Errorf("%w: tag the user with the principal it acts as: nsc edit user --name %s --tag %s<tenant>/<user> (%srath/<role> for a Rath service; docs/security.md)", ErrNoPrincipalTag, c.Name, PrincipalTag, PrincipalTag)
	case 1:
	default:
		return "", events.Principal{}, fmt.Errorf("the user JWT names %d Rath principals (%s): keep one %s tag", len(named), strings.Join(named, ", "), PrincipalTag)
	}
	p, err := events.ParseActor(named[0])
	if err != nil {
		return "", events.Principal{}, fmt.Errorf("the %s tag: %w", PrincipalTag, err)
	}
	if !p.IsService() {
		return RoleClient, p, nil
	}
	role, err := ParseRole(p.User)
	if err != nil || role == RoleClient {
		return "", events.Principal{}, fmt.Errorf("the %s tag names %s: a principal of tenant %s must name a service role or admin", PrincipalTag, p, events.ServiceTenant)
	}
	return role, p, nil
}

// jwtOptions returns the options that authenticate with a checked user
// JWT file: nats.go's own reading of the file at path (read again at every
// reconnect, so a renewed JWT is picked up), or, without a path, the JWT
// and seed held in memory.
func jwtOptions(u userJWT, path string) []nats.Option {
	if path != "" {
		return []nats.Option{nats.UserCredentials(path)}
	}
	return []nats.Option{nats.UserJWTAndSeed(u.token, string(u.seed))}
}

// UserPermissions is p as a user JWT's permissions: what nsc's --allow-pub,
// --deny-pub, --allow-sub and --allow-pub-response set. A user minted with
// them is held to the same table as the server configuration's users.
func UserPermissions(p Permissions) jwt.Permissions {
	var out jwt.Permissions
	out.Pub.Allow.Add(p.Publish.Allow...)
	out.Pub.Deny.Add(p.Publish.Deny...)
	out.Sub.Allow.Add(p.Subscribe.Allow...)
	out.Sub.Deny.Add(p.Subscribe.Deny...)
	if p.Respond {
		out.Resp = &jwt.ResponsePermission{MaxMsgs: 1}
	}
	return out
}

// UserClaims returns the claims of a user JWT for id's principal, with its
// permissions and principal tag, for an account to sign: what a test or a
// program minting users itself needs (nsc users: deploy/nats-operator).
func UserClaims(publicKey string, role Role, p events.Principal) *jwt.UserClaims {
	c := jwt.NewUserClaims(publicKey)
	c.Name = p.String()
	if role != RoleClient {
		c.Name = string(role)
	}
	c.Permissions = UserPermissions(Identity{Role: role, Principal: p}.Permissions())
	c.Tags.Add(PrincipalTag + p.String())
	return c
}
