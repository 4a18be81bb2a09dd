package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/pkg/auth"
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
		RunE: func(*cobra.Command, []string) error {
			set, err := auth.Load(dir)
			if err != nil {
				return err
			}
			return a.printIdentities(set)
		},
	}
	show.Flags().StringVar(&dir, "dir", filepath.Join(".rath", "data", "creds"), "credentials directory")
	cmd.AddCommand(mint, show)
	return cmd
}

func (a *app) printIdentities(set *auth.Set) error {
	if a.json {
		type row struct {
			Role      auth.Role `json:"role"`
			PublicKey string    `json:"public_key"`
			File      string    `json:"file"`
		}
		var rows []row
		for _, id := range set.Identities() {
			rows = append(rows, row{id.Role, id.PublicKey, id.Path})
		}
		return a.printJSON(rows)
	}
	for _, id := range set.Identities() {
		fmt.Fprintf(a.Stdout, "%-13s %s  %s\n", id.Role, id.PublicKey, id.Path)
	}
	return nil
}
