package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
)

// envFile is the name of the public keys' environment file mint writes.
const envFile = "nkeys.env"

func (a *app) credsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "creds",
		Short: "Mint and show the NATS identities of Rath's roles (docs/security.md)",
	}
	var out string
	mint := &cobra.Command{
		Use:   "mint",
		Short: "Write a new identity for every role into an empty directory, for an external NATS server",
		Long: `mint writes one credentials file per role (ledger, selector, agent-worker,
tool-runner, memory-svc, admin, client: <role>.creds, mode 0600) into --out
(created 0700), and nkeys.env with their public keys, which
deploy/nats-server.conf reads from the environment:

  rath creds mint --out ./rath-creds
  set -a; . ./rath-creds/nkeys.env; set +a
  nats-server -c deploy/nats-server.conf

rath up creates its own identities under <data>/creds; mint is for a server you
run, and for rotation (mint into a new directory, reconfigure, restart).`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if out == "" {
				return usageError{fmt.Errorf("--out is required")}
			}
			set, err := auth.Mint(out)
			if err != nil {
				return err
			}
			env := filepath.Join(out, envFile)
			if err := os.WriteFile(env, set.Env(), 0o644); err != nil {
				return fmt.Errorf("write %s: %w", env, err)
			}
			return a.printIdentities(set)
		},
	}
	mint.Flags().StringVar(&out, "out", "", "directory to write the credentials into (must hold none yet)")
	var dir string
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the role, public key and file of every identity in a credentials directory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			set, err := loadCreds(cmd, dir)
			if err != nil {
				return err
			}
			return a.printIdentities(set)
		},
	}
	show.Flags().StringVar(&dir, "dir", defaultCredsDir, "credentials directory (default: rath up's, here or in a parent directory)")
	var tenant, user, addDir string
	var approver []string
	add := &cobra.Command{
		Use:   "add",
		Short: "Create the identity of a tenant's user: it sees and works that tenant's sessions only",
		Long: `add writes tenants/<tenant>/<user>.creds (mode 0600) under --dir, the
identity of one user of a tenant. A tenant's users may ask the ledger and the
memory service, propose, and watch, for their own tenant's sessions only; a
session of another tenant does not exist for them (docs/security.md).

  rath creds add --tenant acme --user alice
  kill -HUP <pid of rath up>       # or restart it: rath up loads the identities at start
  rath --creds .rath/data/creds/tenants/acme/alice.creds start --task "acme's work"

An existing identity is printed, not replaced. For an external server, add the
printed user block to the users of deploy/nats-server.conf and reload it.

--approver ROLE (repeatable) gives the user an approver role in --dir's
approvers file: it may then grant or reject the approvals that ask that role
(a workflow gate's approver). The ledger reads the file at each decision; an
existing user gets the roles added (docs/security.md#approver-roles).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := events.Principal{Tenant: tenant, User: user}
			if err := events.ValidateTenant(tenant); err != nil {
				return usageError{err}
			}
			if err := p.Validate(); err != nil {
				return usageError{err}
			}
			set, err := loadCreds(cmd, addDir)
			if err != nil {
				return err
			}
			id, err := set.AddUser(p)
			if err != nil {
				return err
			}
			if len(approver) > 0 {
				if err := auth.AddApproverRoles(set.Dir, p, approver...); err != nil {
					return err
				}
			}
			if a.json {
				return a.printJSON(identityRow(id))
			}
			fmt.Fprintf(a.Stdout, "%s %s  %s\n", id.Principal, id.PublicKey, id.Path)
			fmt.Fprintf(a.Stdout, "\nFor an external server, add to the users of deploy/nats-server.conf:\n%s", auth.UserBlock(id))
			return nil
		},
	}
	add.Flags().StringVar(&tenant, "tenant", "", "the user's tenant (a-z 0-9 _ -)")
	add.Flags().StringVar(&user, "user", "", "the user's name in the tenant (a-z 0-9 _ -)")
	add.Flags().StringArrayVar(&approver, "approver", nil, "an approver role the user holds (repeatable): it may decide the approvals that ask it")
	add.Flags().StringVar(&addDir, "dir", defaultCredsDir, "credentials directory (default: rath up's <data>/creds, here or in a parent directory)")
	cmd.AddCommand(mint, show, add)
	return cmd
}

// loadCreds loads the credentials directory of --dir: when the flag was
// not given, rath up's in this directory or the nearest parent that has
// one (findCredsDir). A directory that is not there is one error saying
// how to point at rath up's.
func loadCreds(cmd *cobra.Command, dir string) (*auth.Set, error) {
	if !cmd.Flag("dir").Changed {
		if found := findCredsDir(); found != "" {
			dir = found
		}
	}
	set, err := auth.Load(dir)
	if errors.Is(err, auth.ErrNoCredentials) {
		if cmd.Flag("dir").Changed {
			return nil, fmt.Errorf("%w (named by --dir): rath up writes its credentials in <data>/creds, %s where it runs", err, defaultCredsDir)
		}
		return nil, &causedError{fmt.Sprintf("no credentials directory of rath up (%s) here or in a parent directory: run this in the directory where rath up runs (or below it), or pass --dir DIR/%s, DIR being that directory (rath up creates it on its first start)", defaultCredsDir, defaultCredsDir), err}
	}
	return set, err
}

// identityJSON is an identity as --json prints it.
type identityJSON struct {
	Role      auth.Role `json:"role"`
	Principal string    `json:"principal"`
	PublicKey string    `json:"public_key"`
	File      string    `json:"file"`
}

func identityRow(id auth.Identity) identityJSON {
	return identityJSON{id.Role, id.Principal.String(), id.PublicKey, id.Path}
}

func (a *app) printIdentities(set *auth.Set) error {
	if a.json {
		var rows []identityJSON
		for _, id := range set.Identities() {
			rows = append(rows, identityRow(id))
		}
		return a.printJSON(rows)
	}
	for _, id := range set.Identities() {
		fmt.Fprintf(a.Stdout, "%-13s %-20s %s  %s\n", id.Role, id.Principal, id.PublicKey, id.Path)
	}
	return nil
}
