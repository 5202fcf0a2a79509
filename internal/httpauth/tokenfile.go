package httpauth

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
)

// MinTokenBytes is the shortest token accepted: a token anyone can guess
// protects nothing, and `openssl rand -hex 32` makes 64 characters.
const MinTokenBytes = 16

var (
	tokenName  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$`)
	tokenValue = regexp.MustCompile(`^[A-Za-z0-9._~+/=-]+$`)
)

// LoadTokenFile reads a token file: one token a line,
//
//	NAME:TOKEN[:ROLE]
//
// NAME is who holds the token (it shows in the logs and, in the console,
// as the author of a decision); TOKEN is at least MinTokenBytes of
// letters, digits and ._~+/=- (base64 or hex); ROLE is reader (default) or
// operator. Blank lines and lines starting with # are skipped. A name may
// have several tokens (rotation: add the new one, restart, remove the old
// one), a token only one name. The file must not be readable by others
// (CheckPrivate). Errors name the file and the line, never the token.
func LoadTokenFile(path string) ([]Token, error) {
	if err := CheckPrivate(path); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	var ts []Token
	seen := map[string]int{} // token -> line
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t, err := parseTokenLine(line)
		if err != nil {
			return nil, fmt.Errorf("token file %s line %d: %w", path, n, err)
		}
		if first, dup := seen[t.Value]; dup {
			return nil, fmt.Errorf("token file %s line %d: the token of line %d again; a token must name one holder", path, n, first)
		}
		seen[t.Value] = n
		ts = append(ts, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("token file %s holds no token (lines NAME:TOKEN[:ROLE])", path)
	}
	return ts, nil
}

func parseTokenLine(line string) (Token, error) {
	f := strings.Split(line, ":")
	if len(f) < 2 || len(f) > 3 {
		return Token{}, fmt.Errorf("want NAME:TOKEN or NAME:TOKEN:ROLE, got %d field(s) separated by ':'", len(f))
	}
	t := Token{Name: strings.TrimSpace(f[0]), Value: strings.TrimSpace(f[1]), Role: RoleReader}
	switch {
	case !tokenName.MatchString(t.Name):
		return Token{}, fmt.Errorf("name %q must be 1 to 64 letters, digits or ._@+- and start with a letter or digit", t.Name)
	case len(t.Value) < MinTokenBytes:
		return Token{}, fmt.Errorf("the token of %s is %d characters, want at least %d (openssl rand -hex 32)", t.Name, len(t.Value), MinTokenBytes)
	case !tokenValue.MatchString(t.Value):
		return Token{}, fmt.Errorf("the token of %s has characters other than letters, digits and ._~+/=-", t.Name)
	}
	if len(f) == 3 {
		r, err := ParseRole(strings.TrimSpace(f[2]))
		if err != nil {
			return Token{}, fmt.Errorf("%s: %w", t.Name, err)
		}
		t.Role = r
	}
	return t, nil
}

// CheckPrivate refuses a secret file that other users may read or that
// its group may write, as ssh does with private keys: a token readable by
// every account on the host is not a secret. Group read is allowed, since
// Kubernetes mounts secrets group-readable for the pod's fsGroup
// (defaultMode 0440).
func CheckPrivate(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("token file %s is not a regular file", path)
	}
	if runtime.GOOS == "windows" {
		return nil // no Unix permission bits to check
	}
	if perm := st.Mode().Perm(); perm&0o027 != 0 {
		return fmt.Errorf("token file %s has mode %04o: other users may read or change it; chmod 600 %s (0640 or 0440 when a group must read it)", path, perm, path)
	}
	return nil
}
