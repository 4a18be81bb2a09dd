package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/services/session-ledger/service"
)

func (a *app) verifyCmd() *cobra.Command {
	var (
		dossierDir, receipt string
		evalReport          string
		keyFiles            []string
		showKey             bool
	)
	cmd := &cobra.Command{
		Use:   "verify SESSION | verify --dossier DIR | verify --receipt FILE | verify --eval-report FILE --key KEY | verify --show-key",
		Short: "Check a session's hash chain and signatures, a dossier offline, or a receipt",
		Long: `verify asks the ledger to recompute every hash of the session's logical log
from the stream, through its fork ancestry, to check that every event is signed
by a ledger key and that the head's signature holds (it vouches for every event
below it), and to compare the log with the head the ledger recorded apart from
it. It prints "OK <session> head <seq> <hash> signed by <key ID>" (and, on a
second line, the events after the head the ledger last recorded apart from
the log, which it records within a second: a cut of those would not show yet;
docs/security.md), or
"BROKEN <session> at <seq>: <reason>" and exits with code 5: an event altered,
inserted, removed, reordered, or written around the ledger (forged, even with a
correct chain hash), or a tail cut off.

--dossier DIR checks an exported dossier offline, without NATS, signatures
included (see "rath export" and docs/dossier.md).

--receipt FILE checks an ack kept by a client (the JSON "rath emit --json" and
"rath start --json" print): its signature, that the ledger's log holds that
event at that place, and that the chain holds through the head.

--eval-report FILE checks a rath eval report.json (or the --out directory
holding it) offline, with the pinned keys of --key: every run's head is
signed by one of them for that session, sequence and hash, and every
summary is what its runs give. rath verify SESSION then checks each
session against the ledger, rath export its dossier.

--show-key prints the ledger's public keys. Trusting keys because the ledger
says so trusts the ledger: pin the key file (<data>/keys/ledger.pub) with --key.
For a session, --key also checks the head's signature the ledger reports.

With --json, a session's report has these fields:
  session, ok      the session verified, and whether its log holds
  head, head_hash  the last sequence checked and its hash
  head_sig, key_id the ledger's signature of the head, and the key that made it
  checked          events whose hash was recomputed: the whole logical log,
                   the ancestors' events up to each fork point included
  signatures       signatures checked: one per segment of the logical log
                   (each fork point's, then the head's), since the ledger
                   never chains onto an event whose signature it has not
                   checked, so a signature vouches for every event below it;
                   more only when one fails, to find the first bad event.
                   So "checked": 4 beside "signatures": 1 is a session of
                   four events, no fork, all covered by the head's signature
  recorded_head    the head the ledger last recorded apart from the log
                   (absent: none yet; events after it are the unrecorded tail)
  fault            where the chain does not hold: seq, session, stream_seq,
                   reason (absent when ok)
--dossier reports dir, ok, session, root, branches, events, heads (each
branch's verified head), keys (every event's signature is checked offline),
pinned (the keys were --key's, not the dossier's) and fault; --receipt
reports ok, receipt, key_id, pinned, chain (the session's report, as above)
and reason; --eval-report reports id (the eval's), ok, runs, heads (those
whose signature was checked) and problems.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if dossierDir != "" || receipt != "" || evalReport != "" || showKey {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			pinned, err := readKeys(keyFiles)
			if err != nil {
				return usageError{err}
			}
			switch {
			case dossierDir != "":
				return a.verifyDossier(dossierDir, pinned)
			case evalReport != "":
				return a.verifyEvalReport(evalReport, pinned)
			case showKey:
				return a.showKeys(cmd.Context())
			case receipt != "":
				return a.verifyReceipt(cmd.Context(), receipt, pinned)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.Verify(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if r.OK && pinned != nil {
				// The ledger's word, checked against the auditor's key: its
				// head signature must be one the pinned key made.
				if err := pinned.Verify(r.Session, r.Head, r.HeadHash, r.HeadSig); err != nil {
					r.OK, r.Fault = false, &api.Fault{Seq: r.Head, Session: r.Session, Reason: fmt.Sprintf("the head's signature, checked with the pinned key: %v", err)}
				}
			}
			switch {
			case a.json:
				err = a.printJSON(r)
			case r.OK:
				_, err = fmt.Fprintf(a.Stdout, "OK %s head %d %s signed by %s\n", r.Session, r.Head, r.HeadHash, r.KeyID)
				if from, to, tail := r.Unrecorded(); tail && err == nil {
					it := pronoun(from, to, "it", "them")
					_, err = fmt.Fprintf(a.Stdout, "  %s: no head recorded apart from the log covers %s yet (the ledger records one within a second): a cut of %s would not show here until it does; %s (rath verify --receipt)\n",
						seqRange(from, to), it, it, pronoun(from, to, "its receipt proves it", "their receipts prove them"))
				}
			case r.Fault != nil:
				_, err = fmt.Fprintf(a.Stdout, "BROKEN %s at %d: %s\n", r.Session, r.Fault.Seq, r.Fault.Reason)
			}
			if err != nil {
				return err
			}
			if !r.OK {
				return &brokenError{session: r.Session, fault: r.Fault}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dossierDir, "dossier", "", "verify the exported dossier in DIR offline (no NATS) instead of a session")
	f.StringVar(&receipt, "receipt", "", "verify a receipt (an ack as JSON) against the ledger's log")
	f.StringVar(&evalReport, "eval-report", "", "verify a rath eval report.json (or its --out directory) offline with the --key files: its heads' signatures and its metrics")
	f.StringSliceVar(&keyFiles, "key", nil, "trust only these ledger public key files (PKIX PEM, e.g. .rath/data/keys/ledger.pub): for a session, the head's signature is checked with them too")
	f.BoolVar(&showKey, "show-key", false, "print the ledger's public keys")
	return cmd
}

// readKeys reads pinned public key files into a keyring (nil: none pinned).
func readKeys(paths []string) (events.Keyring, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	keys, err := service.ReadPublicKeys(paths)
	if err != nil {
		return nil, fmt.Errorf("--key: %w", err)
	}
	return events.NewKeyring(keys...), nil
}

func (a *app) showKeys(ctx context.Context) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	k, err := c.Keys(ctx)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(k)
	}
	for _, key := range k.Keys {
		current := ""
		if key.ID == k.Current {
			current = " (signs new events)"
		}
		if _, err := fmt.Fprintf(a.Stdout, "key %s%s\n%s", key.ID, current, key.PEM); err != nil {
			return err
		}
	}
	return nil
}

// receiptReport is what verify --receipt found.
type receiptReport struct {
	OK      bool       `json:"ok"`
	Receipt api.Ack    `json:"receipt"`
	KeyID   string     `json:"key_id,omitempty"`
	Pinned  bool       `json:"pinned"`
	Chain   api.Report `json:"chain"`
	Reason  string     `json:"reason,omitempty"`
}

func (a *app) verifyReceipt(ctx context.Context, path string, pinned events.Keyring) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return usageError{fmt.Errorf("--receipt: %w", err)}
	}
	var ack api.Ack
	if err := json.Unmarshal(data, &ack); err != nil || ack.Session == "" || ack.Seq == 0 || ack.Hash == "" {
		return usageError{fmt.Errorf("--receipt %s: not a receipt (a JSON ack with session, seq, hash and sig): %v", path, err)}
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	rep, err := checkReceipt(ctx, c, ack, pinned)
	if err != nil {
		return err
	}
	switch {
	case a.json:
		err = a.printJSON(rep)
	case rep.OK:
		trust := "named by the ledger itself: pin its key with --key"
		if rep.Pinned {
			trust = "a pinned key"
		}
		_, err = fmt.Fprintf(a.Stdout, "OK receipt %s:%d event %s hash %s signed by %s (%s); in the log, chain OK through head %d\n",
			ack.Session, ack.Seq, ack.ID, ack.Hash, rep.KeyID, trust, rep.Chain.Head)
	default:
		_, err = fmt.Fprintf(a.Stdout, "BROKEN receipt %s:%d: %s\n", ack.Session, ack.Seq, rep.Reason)
	}
	if err != nil {
		return err
	}
	if !rep.OK {
		return &brokenError{session: ack.Session, fault: &api.Fault{Seq: ack.Seq, Session: ack.Session, Reason: rep.Reason}}
	}
	return nil
}

// checkReceipt checks a receipt's signature, that the log holds its event at
// its place, and the session's chain.
func checkReceipt(ctx context.Context, c *client.Client, ack api.Ack, pinned events.Keyring) (receiptReport, error) {
	rep := receiptReport{Receipt: ack, KeyID: events.SigKeyID(ack.Sig), Pinned: pinned != nil}
	ring := pinned
	if ring == nil {
		var err error
		if ring, err = c.Keyring(ctx); err != nil {
			return rep, err
		}
	}
	// A compact batch receipt carries its signature record (api.Ack.Record).
	inline, err := ack.Inline()
	if err == nil {
		err = ring.Verify(inline.Session, inline.Seq, inline.Hash, inline.Sig)
	}
	if err != nil {
		rep.Reason = fmt.Sprintf("the receipt's signature: %v", err)
		return rep, nil
	}
	evs, err := c.Log(ctx, ack.Session, client.Range{From: ack.Seq, To: ack.Seq})
	if errors.Is(err, api.ErrOutOfRange) || errors.Is(err, api.ErrNotFound) || (err == nil && len(evs) == 0) {
		rep.Reason = fmt.Sprintf("the log of %s does not hold sequence %d, which the ledger signed", ack.Session, ack.Seq)
		return rep, nil
	}
	if errors.Is(err, api.ErrDamaged) {
		rep.Reason = err.Error()
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	if ev := evs[0]; ev.Hash != ack.Hash || (ack.ID != "" && ev.ID != ack.ID) {
		rep.Reason = fmt.Sprintf("the log holds event %s with hash %s at %d, the receipt names %s with hash %s", ev.ID, ev.Hash, ack.Seq, ack.ID, ack.Hash)
		return rep, nil
	}
	chain, err := c.Verify(ctx, ack.Session)
	if errors.Is(err, api.ErrDamaged) {
		rep.Reason = err.Error()
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	rep.Chain = chain
	if !chain.OK {
		rep.Reason = fmt.Sprintf("the session's chain is broken at %d: %s", chain.Fault.Seq, chain.Fault.Reason)
		return rep, nil
	}
	rep.OK = true
	return rep, nil
}

// seqRange names events from..to: "event 7" or "events 7..9".
func seqRange(from, to uint64) string {
	if from == to {
		return fmt.Sprintf("event %d", from)
	}
	return fmt.Sprintf("events %d..%d", from, to)
}

// pronoun is one or many, as from..to is one event or more.
func pronoun(from, to uint64, one, many string) string {
	if from == to {
		return one
	}
	return many
}
