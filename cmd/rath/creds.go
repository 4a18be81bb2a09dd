package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

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
tool-runner, memory-svc, admin, client: <role>.nk, mode 0600) into --out
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
		Long: `add writes tenants/<tenant>/<user>.nk (mode 0600) under --dir, the
identity of one user of a tenant. A tenant's users may ask the ledger and the
memory service, propose, and watch, for their own tenant's sessions only; a
session of another tenant does not exist for them (docs/security.md).

  rath creds add --tenant acme --user alice
  kill -HUP <pid of rath up>       # or restart it: rath up loads the identities at start
  rath --creds .rath/data/creds/tenants/acme/alice.nk start --task "acme's work"

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
	cmd.AddCommand(mint, show, add, a.tokenCmd())
	return cmd
}

// tokenCmd is rath creds token: the model gateway's bearer tokens.
func (a *app) tokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Mint, list and revoke the model gateway's bearer tokens, each acting as one tenant's user",
		Long: `A gateway token is the API key a program hands Rath's model gateway
(Authorization: Bearer <token>): it acts as exactly one tenant's user, never
as the operator's provider key. Only its SHA-256 is kept, in
<credentials directory>/gateway-tokens (mode 0600): the token is printed once,
by add. The gateway rereads the file when it changes: a token added or removed
counts at the next request, with no restart (docs/security.md#gateway-tokens).`,
		Example: `  rath creds token add --user acme/alice --name alice-laptop   # the token alone on stdout: TOKEN=$(rath creds token add ...)
  rath creds token ls
  rath creds token rm alice-laptop`,
	}
	var dir, user, name string
	add := &cobra.Command{
		Use:   "add",
		Short: "Mint a token for a tenant's user: printed once, on stdout alone",
		Long: `add mints a token acting as --user (TENANT/USER, a user rath creds add
created) and prints it on stdout, alone, so that TOKEN=$(rath creds token add
...) takes it; a note goes to stderr. It is shown this once: Rath keeps its
hash only. --name names it for ls and rm (default <tenant>-<user>-<8 hex
digits>).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if user == "" {
				return usageError{fmt.Errorf("--user TENANT/USER is required")}
			}
			p, err := events.ParseActor(user)
			if err != nil {
				return usageError{fmt.Errorf("--user: %w", err)}
			}
			if err := events.ValidateTenant(p.Tenant); err != nil {
				return usageError{fmt.Errorf("--user: %w", err)}
			}
			if name != "" {
				if err := auth.ValidateTokenName(name); err != nil {
					return usageError{fmt.Errorf("--name: %w", err)}
				}
			}
			set, err := loadCreds(cmd, dir)
			if err != nil {
				return err
			}
			token, err := auth.MintToken(set.Dir, p, name)
			if err != nil {
				return err
			}
			// Looked up as the gateway will: the name (when defaulted), and
			// proof the file serves it.
			_, minted, err := auth.OpenTokens(auth.TokensPath(set.Dir)).Lookup(token)
			if err != nil {
				return fmt.Errorf("the token minted for %s does not look up: %w", p, err)
			}
			if a.json {
				return a.printJSON(struct {
					Name  string `json:"name"`
					User  string `json:"user"`
					Token string `json:"token"`
				}{minted, p.String(), token})
			}
			fmt.Fprintln(a.Stdout, token)
			fmt.Fprintf(a.Stderr, "Gateway token %s acts as %s. It is shown this once: store it now. Use it as the API key of Rath's model gateway (Authorization: Bearer <token>); revoke it with: %s creds token rm %s\n", minted, p, a.self(), minted)
			return nil
		},
	}
	add.Flags().StringVar(&user, "user", "", "the tenant's user the token acts as: TENANT/USER")
	add.Flags().StringVar(&name, "name", "", "the token's name (a-z 0-9 . _ -; default <tenant>-<user>-<8 hex digits>)")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the gateway tokens: name, user, created (never the tokens)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			set, err := loadCreds(cmd, dir)
			if err != nil {
				return err
			}
			list, err := auth.ListTokens(set.Dir)
			if err != nil {
				return err
			}
			if a.json {
				rows := make([]tokenJSON, 0, len(list))
				for _, t := range list {
					rows = append(rows, tokenJSON{t.Name, t.Principal.String(), t.Created})
				}
				return a.printJSON(rows)
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tUSER\tCREATED")
			for _, t := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, t.Principal, stamp(t.Created))
			}
			return tw.Flush()
		},
	}
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Revoke a gateway token: refused from the gateway's next request on",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := auth.ValidateTokenName(args[0]); err != nil {
				return usageError{err}
			}
			set, err := loadCreds(cmd, dir)
			if err != nil {
				return err
			}
			if err := auth.RevokeToken(set.Dir, args[0]); err != nil {
				return err
			}
			if a.json {
				return a.printJSON(map[string]string{"revoked": args[0]})
			}
			fmt.Fprintf(a.Stdout, "revoked %s\n", args[0])
			return nil
		},
	}
	for _, c := range []*cobra.Command{add, ls, rm} {
		c.Flags().StringVar(&dir, "dir", defaultCredsDir, "credentials directory (default: rath up's <data>/creds, here or in a parent directory)")
	}
	cmd.AddCommand(add, ls, rm)
	return cmd
}

// tokenJSON is a gateway token as rath creds token ls --json prints it.
type tokenJSON struct {
	Name    string    `json:"name"`
	User    string    `json:"user"`
	Created time.Time `json:"created"`
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
