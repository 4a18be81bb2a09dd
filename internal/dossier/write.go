package dossier

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/openrath/rath/pkg/events"
)

// SchemaID is the $id of the dossier's JSON Schema.
const SchemaID = "urn:rath:schema:dossier.v1.json"

//go:embed dossier.schema.json
var schemaJSON []byte

// Schema returns the JSON Schema (draft 2020-12) of dossier.json.
func Schema() []byte { return bytes.Clone(schemaJSON) }

var compiled = sync.OnceValues(func() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return nil, fmt.Errorf("dossier schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(SchemaID, doc); err != nil {
		return nil, fmt.Errorf("dossier schema: %w", err)
	}
	return c.Compile(SchemaID)
})

// ValidateJSON checks a dossier.json document against the schema.
func ValidateJSON(data []byte) error {
	sch, err := compiled()
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if err := sch.Validate(inst); err != nil {
		return fmt.Errorf("does not match the dossier schema: %w", err)
	}
	return nil
}

// encode writes v as indented JSON without HTML escapes (dossier.json).
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Write writes the dossier into dir (created if needed): dossier.json, its
// schema, dossier.md, graph.svg, graph.html, events/<branch>.jsonl (each
// branch's own events, one stored body a line, exactly as stored) and
// blobs/<hex>. Files of an earlier dossier in dir are overwritten; event and
// blob files no longer named are removed.
func (d *Dossier) Write(dir string) error {
	if d.tree == nil {
		return errors.New("write dossier: it holds no events (build or open it first)")
	}
	for _, sub := range []string{dir, filepath.Join(dir, DirEvents), filepath.Join(dir, DirBlobs)} {
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return fmt.Errorf("write dossier: %w", err)
		}
	}
	js, err := encode(d)
	if err != nil {
		return fmt.Errorf("write dossier: %w", err)
	}
	svg := Graph(d)
	files := map[string][]byte{
		FileJSON:     js,
		FileSchema:   schemaJSON,
		FileMarkdown: []byte(Markdown(d)),
		FileSVG:      []byte(svg),
		FileHTML:     []byte(GraphHTML(d, svg)),
	}
	if plot := ExperimentsSVG(d); plot != "" {
		files[FileExperimentsSVG] = []byte(plot)
	} else if err := os.Remove(filepath.Join(dir, FileExperimentsSVG)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("write dossier: %w", err) // an earlier dossier's plot
	}
	for _, b := range d.Branches {
		var buf bytes.Buffer
		for _, e := range d.tree.Branch(b.ID).Events {
			buf.Write(e.Raw)
			buf.WriteByte('\n')
		}
		files[b.EventsFile] = buf.Bytes()
	}
	for _, bl := range d.Blobs {
		files[bl.File] = d.tree.blobs[bl.Ref]
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), data, 0o644); err != nil {
			return fmt.Errorf("write dossier: %w", err)
		}
	}
	for _, sub := range []string{DirEvents, DirBlobs} {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			return fmt.Errorf("write dossier: %w", err)
		}
		for _, en := range entries {
			if _, ok := files[sub+"/"+en.Name()]; !ok && en.Type().IsRegular() {
				if err := os.Remove(filepath.Join(dir, sub, en.Name())); err != nil {
					return fmt.Errorf("write dossier: %w", err)
				}
			}
		}
	}
	return nil
}

// raw is a dossier directory as read, before any check.
type raw struct {
	d     *Dossier
	own   map[string][]events.Stored
	blobs map[string][]byte
}

// ErrNotDossier is returned (wrapped) by Open and Verify when a directory
// does not hold a readable dossier: no dossier.json, one that is not JSON or
// does not match the schema, a missing or unparsable event file.
var ErrNotDossier = errors.New("not a rath dossier")

// read reads a dossier directory: dossier.json (checked against the schema),
// every branch's event file and every blob it names. It checks nothing
// about hashes.
func read(dir string) (*raw, error) {
	data, err := os.ReadFile(filepath.Join(dir, FileJSON))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w: no %s", dir, ErrNotDossier, FileJSON)
		}
		return nil, fmt.Errorf("read dossier %s: %w", dir, err)
	}
	if err := ValidateJSON(data); err != nil {
		return nil, fmt.Errorf("%s: %w: %s %w", dir, ErrNotDossier, FileJSON, err)
	}
	var d Dossier
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %w: %s: %w", dir, ErrNotDossier, FileJSON, err)
	}
	r := &raw{d: &d, own: map[string][]events.Stored{}, blobs: map[string][]byte{}}
	for _, b := range d.Branches {
		if err := events.ValidateSessionID(b.ID); err != nil {
			return nil, fmt.Errorf("%s: %w: %w", dir, ErrNotDossier, err)
		}
		if _, dup := r.own[b.ID]; dup {
			return nil, fmt.Errorf("%s: %w: branch %s is listed twice", dir, ErrNotDossier, b.ID)
		}
		if want := DirEvents + "/" + b.ID + ".jsonl"; b.EventsFile != want {
			return nil, fmt.Errorf("%s: %w: branch %s: events_file %q, want %q", dir, ErrNotDossier, b.ID, b.EventsFile, want)
		}
		evs, err := readEvents(filepath.Join(dir, filepath.FromSlash(b.EventsFile)))
		if err != nil {
			return nil, fmt.Errorf("%s: %w: branch %s: %w", dir, ErrNotDossier, b.ID, err)
		}
		r.own[b.ID] = evs
	}
	for _, bl := range d.Blobs {
		if bl.File != blobFile(bl.Ref) {
			return nil, fmt.Errorf("%s: %w: blob %s: file %q, want %q", dir, ErrNotDossier, bl.Ref, bl.File, blobFile(bl.Ref))
		}
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(bl.File)))
		if err != nil {
			return nil, fmt.Errorf("%s: %w: blob %s: %w", dir, ErrNotDossier, bl.Ref, err)
		}
		r.blobs[bl.Ref] = data
	}
	return r, nil
}

// maxEventLine bounds one stored event (the ledger's limit is 1 MiB).
const maxEventLine = 8 << 20

func readEvents(path string) ([]events.Stored, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventLine)
	var out []events.Stored
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimRight(sc.Bytes(), "\r")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		ev, err := events.ParseStored(bytes.Clone(line))
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", filepath.Base(path), n, err)
		}
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no events", filepath.Base(path))
	}
	return out, nil
}

// Open reads a dossier directory and verifies it (Verify): the answer of an
// audit question comes only from a dossier whose events hold. A dossier that
// does not verify is a *BrokenError.
func Open(dir string) (*Dossier, error) {
	rep, d, err := verify(dir, nil)
	if err != nil {
		return nil, err
	}
	if !rep.OK {
		return nil, &BrokenError{Dir: dir, Fault: *rep.Fault}
	}
	return d, nil
}

// BrokenError says a dossier directory does not verify.
type BrokenError struct {
	Dir   string
	Fault Fault
}

func (e *BrokenError) Error() string {
	return fmt.Sprintf("dossier %s does not verify: %s", e.Dir, e.Fault)
}

// Fault is the first thing in a dossier that its events do not back.
type Fault struct {
	// Session and Seq name the event (Seq 0: the branch as a whole, or
	// dossier.json itself when Session is empty).
	Session string `json:"session,omitempty"`
	Seq     uint64 `json:"seq,omitempty"`
	Reason  string `json:"reason"`
}

func (f Fault) String() string {
	switch {
	case f.Session == "":
		return f.Reason
	case f.Seq == 0:
		return fmt.Sprintf("%s: %s", f.Session, f.Reason)
	}
	return fmt.Sprintf("%s at %d: %s", f.Session, f.Seq, f.Reason)
}
