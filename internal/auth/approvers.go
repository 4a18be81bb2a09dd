package auth

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/openrath/rath/pkg/events"
)

// ApproversFile is the base name, in a credentials directory, of the file
// that gives principals approver roles: who may grant or reject an
// approval that asks a role (a workflow gate's approver). The NATS server
// authenticates the principal; the ledger reads this file at each decision
// and refuses one by a principal without the role (not_approver).
//
// One line per principal, the principal then its roles, "*" for every
// role; # starts a comment:
//
//	acme/alice maintainers leads
//	default/client *
const ApproversFile = "approvers"

// defaultApprovers is what Ensure writes when a directory has no approvers
// file: the development identity client.nk may decide every approval,
// so that rath up works out of the box; a deployment gives its approvers
// roles (rath creds add --approver ROLE) and removes the "*" line.
const defaultApprovers = `# Approver roles (docs/security.md#approver-roles): "<tenant>/<user> <role>...";
# "*" is every role. The ledger reads this file at each approval decision.
# The development identity client.nk decides every approval: remove this
# line once your approvers have roles of their own.
default/client *
`

// Approvers maps principals to the approver roles they hold.
type Approvers map[events.Principal][]string

// Roles returns the roles p holds.
func (a Approvers) Roles(p events.Principal) []string { return a[p] }

// ReadApprovers reads an approvers file; a file that does not exist gives
// no principal any role.
func ReadApprovers(path string) (Approvers, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Approvers{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("approvers file: %w", err)
	}
	return ParseApprovers(b, path)
}

// ParseApprovers reads an approvers file's content; name is for errors.
func ParseApprovers(b []byte, name string) (Approvers, error) {
	out := Approvers{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		p, err := events.ParseActor(f[0])
		if err != nil {
			return nil, fmt.Errorf("approvers file %s:%d: %w", name, n, err)
		}
		if len(f) == 1 {
			return nil, fmt.Errorf("approvers file %s:%d: %s names no role", name, n, p)
		}
		for _, r := range f[1:] {
			if !slices.Contains(out[p], r) {
				out[p] = append(out[p], r)
			}
		}
	}
	return out, sc.Err()
}

// ApproverRoles is the ledger's lookup of a principal's roles in the file
// at path, read at each call: a changed file counts at the next decision,
// with no reload.
func ApproverRoles(path string) func(events.Principal) ([]string, error) {
	return func(p events.Principal) ([]string, error) {
		a, err := ReadApprovers(path)
		if err != nil {
			return nil, err
		}
		return a.Roles(p), nil
	}
}

// AddApproverRoles gives p roles in the approvers file of the credentials
// directory dir (creating the file), keeping every other line as it is.
func AddApproverRoles(dir string, p events.Principal, roles ...string) error {
	path := filepath.Join(dir, ApproversFile)
	a, err := ReadApprovers(path)
	if err != nil {
		return err
	}
	missing := slices.DeleteFunc(slices.Clone(roles), func(r string) bool { return slices.Contains(a.Roles(p), r) })
	if len(missing) == 0 {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("approvers file: %w", err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		b = append(b, '\n')
	}
	b = append(b, p.String()+" "+strings.Join(missing, " ")+"\n"...)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("approvers file: %w", err)
	}
	return nil
}

// ensureApprovers writes the default approvers file into dir when it has
// none.
func ensureApprovers(dir string) error {
	path := filepath.Join(dir, ApproversFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("approvers file: %w", err)
	}
	if _, err := f.WriteString(defaultApprovers); err != nil {
		f.Close()
		return fmt.Errorf("approvers file: %w", err)
	}
	return f.Close()
}
