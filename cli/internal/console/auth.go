package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/onceflight/onceflight/internal/httpauth"
)

// How a browser proves who it is. The record API's Authenticator answers
// for bearer tokens (curl, scripts) and a trusted proxy's user header
// (oauth2-proxy); a browser without a proxy cannot send a bearer header,
// so it logs in once with its token and gets a session cookie.
// Sessions live in memory: a restart of the console logs everyone out,
// which costs a login and keeps no session secret on disk.

const (
	sessionCookie = "onceflight_console"
	// MethodSession is Identity.Method for a browser logged in with a
	// token.
	MethodSession = "session"
	// MethodLocal is Identity.Method when no authentication is configured
	// (a console on a loopback address): whoever reaches it acts as the
	// account that started it.
	MethodLocal = "local"
)

type session struct {
	id      httpauth.Identity
	expires time.Time
}

type sessions struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]session // guarded by mu
}

func newSessionID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s *sessions) create(id httpauth.Identity) string {
	sid := newSessionID()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for k, v := range s.m { // drop expired ones: logins are rare, the map small
		if now.After(v.expires) {
			delete(s.m, k)
		}
	}
	s.m[sid] = session{id: id, expires: now.Add(s.ttl)}
	return sid
}

func (s *sessions) get(sid string) (httpauth.Identity, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[sid]
	if !ok || time.Now().After(v.expires) {
		delete(s.m, sid)
		return httpauth.Identity{}, false
	}
	return v.id, true
}

func (s *sessions) drop(sid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, sid)
}

// csrf issues and checks the token every form carries: an HMAC, under a
// key made at start, of who the form was issued to (the session, or the
// identity for proxy and token users) and when. A page of another origin
// cannot read it, so a form it makes a browser post lacks it. It expires
// after ttl, so a form left open overnight is refused with a page that
// says so, not acted on.
type csrf struct {
	key []byte
	ttl time.Duration
}

var (
	errCSRFMissing = errors.New("the form carries no valid CSRF token of this console")
	errCSRFExpired = errors.New("the form has expired")
)

func newCSRF(ttl time.Duration) *csrf {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return &csrf{key: k, ttl: ttl}
}

func (c *csrf) mac(binding string, at int64) []byte {
	m := hmac.New(sha256.New, c.key)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(at))
	m.Write(b[:])
	m.Write([]byte(binding))
	return m.Sum(b[:])
}

func (c *csrf) issue(binding string) string {
	return base64.RawURLEncoding.EncodeToString(c.mac(binding, time.Now().Unix()))
}

func (c *csrf) check(binding, tok string) error {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(raw) != 8+sha256.Size {
		return errCSRFMissing
	}
	at := int64(binary.BigEndian.Uint64(raw[:8]))
	if !hmac.Equal(raw, c.mac(binding, at)) {
		return errCSRFMissing
	}
	if time.Since(time.Unix(at, 0)) > c.ttl {
		return errCSRFExpired
	}
	return nil
}

// identify returns who r comes from and what its forms are bound to.
func (s *Server) identify(r *http.Request) (httpauth.Identity, string, bool) {
	if !s.auth.Enabled() {
		return httpauth.Identity{Name: s.localUser, Role: httpauth.RoleOperator, Method: MethodLocal}, "local", true
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		if id, ok := s.sessions.get(c.Value); ok {
			return id, "session:" + c.Value, true
		}
	}
	if id, err := s.auth.Authenticate(r); err == nil {
		return id, id.Method + ":" + id.Name, true
	}
	return httpauth.Identity{}, "", false
}
