package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/pkg/events"
)

func (a *app) schemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schema [TYPE]",
		Short: "List the event types, or print one type's JSON Schema",
		Long: `schema without TYPE lists the event types this rath knows, with the subject
token and dataschema of each. With TYPE it prints the JSON Schema the
ledger validates that type's data against.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return a.listTypes()
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			raw, err := c.Schema(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			var b bytes.Buffer
			if err := json.Indent(&b, raw, "", "  "); err != nil {
				return fmt.Errorf("schema of %s: %w", args[0], err)
			}
			b.WriteByte('\n')
			_, err = a.Stdout.Write(b.Bytes())
			return err
		},
	}
}

// listTypes lists the catalog compiled into this binary, with each type's
// subject token and schema URN (rath.ledger.schema with no type lists the
// ledger's own types, without those).
func (a *app) listTypes() error {
	type entry struct {
		Type       string `json:"type"`
		Token      string `json:"token"`
		DataSchema string `json:"dataschema"`
	}
	var list []entry
	for _, k := range events.Kinds() {
		list = append(list, entry{Type: k.Type, Token: k.Token, DataSchema: k.DataSchema()})
	}
	if a.json {
		return a.printJSON(list)
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tTOKEN\tDATASCHEMA")
	for _, e := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", e.Type, e.Token, e.DataSchema)
	}
	return tw.Flush()
}
