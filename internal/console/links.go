package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultLinkTTL is how long a sign-in link stays valid unused.
const DefaultLinkTTL = 15 * time.Minute

// Links has the console sign people in with one-time links (Server.Link)
// that whoever started it prints: opening one gives the browser a sign-in
// that reads and acts as the console's own client, as a console without
// sign-in would for anyone (ADR 0032). A link signs in once, and only
// within TTL of being issued; the sign-in then lasts until it idles out or
// the person signs out, like a credentials sign-in.
type Links struct {
	// TTL is how long a link stays valid unused (default DefaultLinkTTL).
	TTL time.Duration
}

// WithLinks has the console sign people in with one-time links (Links) as
// its own client, which New then requires.
func WithLinks(l Links) Option {
	return func(s *Server) {
		if l.TTL <= 0 {
			l.TTL = DefaultLinkTTL
		}
		s.links = &l
	}
}

// link is an issued link not used yet.
type link struct {
	next    string
	expires time.Time
}

// linkKey is what the console keeps of a link's token: its hash, so that
// neither a lookup's timing nor the console's memory gives a token away.
type linkKey [sha256.Size]byte

func keyOf(token string) linkKey { return sha256.Sum256([]byte(token)) }

// Link issues a one-time sign-in link that leads to next (a path of the
// console; "" is the sessions page). It returns the link's path,
// /login/TOKEN (TOKEN 256 random bits), and when it expires unused.
func (s *Server) Link(next string) (string, time.Time, error) {
	if s.links == nil {
		return "", time.Time{}, fmt.Errorf("console: no sign-in links (WithLinks)")
	}
	if next == "" {
		next = "/"
	}
	if u, err := url.Parse(next); err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(next, "/") ||
		strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "", time.Time{}, fmt.Errorf("console: a link leads to a path of the console, not %q", next)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", time.Time{}, fmt.Errorf("console: link token: %w", err)
	}
	token := base64.RawURLEncoding.EncodeToString(raw[:])
	now := s.now()
	expires := now.Add(s.links.TTL)
	s.mu.Lock()
	for k, l := range s.pending { // the expired ones go as new ones come
		if !now.Before(l.expires) {
			delete(s.pending, k)
		}
	}
	s.pending[keyOf(token)] = link{next: next, expires: expires}
	s.mu.Unlock()
	return "/login/" + token, expires, nil
}

// signedInPage says who the link signed in as and goes on to where it
// leads (app.js follows Next at once; the page itself sets the cookie, so
// that the next request is one the console's own page started, which
// carries a SameSite=Strict cookie even when the link was opened from
// another site's page).
type signedInPage struct {
	Frame
	Next string
}

// useLink exchanges a link's token, once, for a sign-in as the console's
// own client. A token unknown, used or expired is refused alike, and is
// used up by the attempt either way.
func (s *Server) useLink(w http.ResponseWriter, r *http.Request) {
	if s.links == nil {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet {
		// HEAD, which GET routes also take: a link preview must not
		// use the link up.
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "console: open the link with GET", http.StatusMethodNotAllowed)
		return
	}
	key := keyOf(r.PathValue("token"))
	now := s.now()
	s.mu.Lock()
	l, ok := s.pending[key]
	delete(s.pending, key)
	s.mu.Unlock()
	if !ok || !now.Before(l.expires) {
		why := "unknown or used"
		if ok {
			why = "expired"
		}
		s.log.Warn("console: sign-in link refused", "why", why, "remote", r.RemoteAddr)
		msg := fmt.Sprintf("This sign-in link is not valid: a link signs in once, within %s of being printed. Ask for a new one (rath up prints one on SIGHUP)", s.links.TTL)
		if s.login != nil {
			msg += ", or sign in with your credentials below"
		}
		s.refuseSignIn(w, msg+".")
		return
	}
	u, err := s.signIn(s.c, nil, s.c.Principal())
	if err != nil {
		s.log.Error("console: sign-in by link", "err", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	s.endSignIn(r)
	setCookie(w, r, u)
	w.Header().Set("Cache-Control", "no-store")
	s.log.Info("console: signed in", "as", u.as.String(), "with", "link", "remote", r.RemoteAddr)
	s.render(w, r.WithContext(withUser(r.Context(), u)), "signedin.html", "Signed in", &signedInPage{Next: l.next})
}
