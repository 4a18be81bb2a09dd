package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// ErrNotPublic marks the error of Check and Entry.Check for a destination
// that is not public and that the operator's allowlist does not name.
var ErrNotPublic = errors.New("not a public destination")

// AllowFlag is the operator's flag that allows more than public
// destinations, on rath up and on the tool runner.
const AllowFlag = "--sandbox-allow-net"

// Entry is one entry of a network list: a host name, "*.domain" (the names
// under domain), or an address, with its ports.
type Entry struct {
	// Text is the entry as written.
	Text string
	// Host is the name in lower case without a trailing dot ("*.domain"
	// for a wildcard), or the address in its canonical form.
	Host string
	// Addr is the address when the entry names one.
	Addr netip.Addr
	// Ports are the entry's port, or 443 and 80 when it names none.
	Ports []int
}

// Wildcard tells whether the entry names the names under a domain.
func (e Entry) Wildcard() bool { return strings.HasPrefix(e.Host, "*.") }

// ParseEntry reads a network entry: "host", "host:port", "*.domain",
// "*.domain:port", an IPv4 address, or an IPv6 one bare or in brackets
// ("[::1]:8080"). An address must be written in its canonical form
// (127.0.0.1, not 2130706433 or 0x7f.1; ::1, not 0:0::1) and without a
// zone; the error of another spelling says which address it is.
func ParseEntry(text string) (Entry, error) {
	e := Entry{Text: text, Ports: []int{443, 80}}
	host := text
	if h, port, err := net.SplitHostPort(text); err == nil {
		n, err := strconv.Atoi(port)
		if err != nil || n <= 0 || n > 65535 || strconv.Itoa(n) != port {
			return Entry{}, fmt.Errorf("%q: bad port", text)
		}
		host, e.Ports = h, []int{n}
	} else if h, ok := strings.CutPrefix(text, "["); ok && strings.HasSuffix(h, "]") {
		host = strings.TrimSuffix(h, "]")
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	name, wild := strings.CutPrefix(host, "*.")
	if name == "" || strings.ContainsAny(name, "/@*?#[]%\\ \t\r\n") || strings.HasPrefix(name, "-") || strings.HasPrefix(name, ".") || strings.Contains(name, "..") {
		if a, err := netip.ParseAddr(host); err == nil && a.Zone() != "" {
			return Entry{}, fmt.Errorf("%q names %s with a zone, an interface of the runner's host (%s): network entries take none", text, a.WithZone(""), Classify(a))
		}
		return Entry{}, fmt.Errorf("%q is not a host name or address (host, host:port, *.domain, an IP address)", text)
	}
	a, canonical, isAddr, err := Literal(name)
	switch {
	case err != nil:
		return Entry{}, fmt.Errorf("%q: %w", text, err)
	case isAddr && wild:
		return Entry{}, fmt.Errorf("%q: a wildcard names the names under a domain, not addresses", text)
	case isAddr && !canonical:
		if why := Classify(a); why != "" {
			return Entry{}, fmt.Errorf("%q spells %s, %s: write addresses as %s, and see %s", text, a, why, a, AllowFlag)
		}
		return Entry{}, fmt.Errorf("%q spells %s: write it as %s", text, a, a)
	case isAddr:
		e.Addr = a
		host = a.String()
	}
	e.Host = host
	return e, nil
}

// RefusedError is the error of Entry.Check: the entry names a destination
// that is not public, and the operator's allowlist does not name it.
type RefusedError struct {
	Entry Entry
	// Why says what the destination is ("a loopback address").
	Why string
}

func (e *RefusedError) Error() string {
	advice := fmt.Sprintf("a workflow may name it only if the tool runner's operator allows it (%s %s on rath up or the tool runner)", AllowFlag, e.Entry.Text)
	if e.Entry.Wildcard() {
		advice = fmt.Sprintf("a workflow may name a host under it only if the tool runner's operator allows that host (%s HOST on rath up or the tool runner)", AllowFlag)
	}
	return fmt.Sprintf("%q names %s, %s: %s", e.Entry.Text, e.Entry.Host, e.Why, advice)
}

// Is makes errors.Is(err, ErrNotPublic) hold.
func (e *RefusedError) Is(target error) bool { return target == ErrNotPublic }

// Check refuses the entry with a *RefusedError (ErrNotPublic) when it names a
// destination that is not public (an address of a special range, a special
// name, or a wildcard covering special names) and that allow does not name
// for every one of its ports.
func (e Entry) Check(allow Allowlist) error {
	why := ""
	switch {
	case e.Addr.IsValid():
		why = Classify(e.Addr)
	case e.Wildcard():
		// "*.google.internal" covers metadata.google.internal.
		why = SpecialName("x" + e.Host[1:])
	default:
		why = SpecialName(e.Host)
	}
	if why == "" {
		return nil
	}
	for _, p := range e.Ports {
		if e.Addr.IsValid() && !allow.Addr(e.Addr, p) || !e.Addr.IsValid() && !allow.Name(e.Host, p) {
			return &RefusedError{Entry: e, Why: why}
		}
	}
	return nil
}

// Check parses and checks one network entry.
func Check(text string, allow Allowlist) (Entry, error) {
	e, err := ParseEntry(text)
	if err != nil {
		return Entry{}, err
	}
	return e, e.Check(allow)
}
