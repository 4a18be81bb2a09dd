package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// How the remote backend runs a command (ADR 0041). The workspace's git
// repository stays on the runner: file tools edit it and Commit records it,
// as on the other backends. Before a command, the runner sends the sandbox
// what changed in the workspace since the last sync (uploads and deletes,
// told by each file's identity, never .git); after it, the runner lists the
// sandbox's files, downloads those whose size or time changed and writes
// them into the workspace, and deletes those the command deleted. Every
// path the service names is checked before anything is written, and writes
// go through an os.Root on the workspace that refuses symbolic links.

// localFile is a workspace file's identity when it was last synced, and
// its content's digest.
type localFile struct {
	size         int64
	mode         fs.FileMode
	ino          uint64
	mtime, ctime int64
	taken        int64 // when the identity was read, in Unix nanoseconds
	sum          [sha256.Size]byte
}

// remoteFile is a file of the sandbox as a listing names it.
type remoteFile struct {
	size int64
	mod  time.Time
	exec bool
}

// remoteRacy is how close to a listing a file's time must be for the next
// listing not to trust it: the service's clock may be coarse (a second).
const remoteRacy = 2 * time.Second

// runRemote is Run on the remote backend.
func (w *localWorkspace) runRemote(ctx context.Context, c Cmd) (Result, error) {
	r := w.l.remote
	timeout, err := w.checkRun(ctx, c)
	if err != nil {
		return Result{}, err
	}
	lim := w.l.cfg.Limits
	script, err := r.script(c)
	if err != nil {
		return Result{}, fmt.Errorf("run in %s: %w", w.id, err)
	}

	b := r.boxOf(w.id)
	b.mu.Lock()
	defer b.mu.Unlock()
	var res Result
	for attempt := 0; ; attempt++ {
		err = r.push(ctx, b, w)
		if err == nil {
			res, err = r.command(ctx, b, script, timeout, lim.Output)
		}
		if !errors.Is(err, errGone) || attempt > 0 {
			break
		}
		// Expired since the last command (a 404 before the command ran):
		// a new sandbox, filled again from the workspace.
		b.id = ""
	}
	if err == nil {
		err = r.pull(ctx, b, w)
	}
	if err != nil {
		// What the sandbox holds is no longer known (or not to be
		// trusted): the next command starts over in a new one.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_ = r.discard(dctx, b)
		cancel()
		return Result{}, fmt.Errorf("run in %s: remote sandbox: %w", w.id, err)
	}
	res.Limits = "timeout=" + timeout.String() + "; " + r.describe()
	if len(c.Hosts) > 0 {
		res.Limits += "; network: the service's policy (the hosts the workflow allows are not enforced by Rath on this backend)"
	}
	res.Stopped = stoppedBy(res, timeout, lim, nil, false)
	return res, ctx.Err()
}

// script is the shell command execd runs for c: its argv quoted for sh,
// and its standard input, if any, fed from the command itself (execd's
// command has no input). The input travels base64-encoded in one argument,
// which the kernel bounds (MAX_ARG_STRLEN, 128 KiB): MaxStdin keeps it
// below.
func (r *remote) script(c Cmd) (string, error) {
	quoted := make([]string, len(c.Args))
	for i, a := range c.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return "", fmt.Errorf("argument %d contains a NUL byte", i)
		}
		quoted[i] = shellQuote(a)
	}
	script := strings.Join(quoted, " ")
	if c.Stdin == nil {
		return script + " </dev/null", nil
	}
	in, err := io.ReadAll(io.LimitReader(c.Stdin, int64(r.cfg.MaxStdin)+1))
	if err != nil {
		return "", fmt.Errorf("read standard input: %w", err)
	}
	if len(in) > r.cfg.MaxStdin {
		return "", fmt.Errorf("standard input is over the remote backend's %d bytes", r.cfg.MaxStdin)
	}
	return "printf %s " + shellQuote(base64.StdEncoding.EncodeToString(in)) + " | base64 -d | " + script, nil
}

// shellQuote quotes s as one word for sh.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ensure gives the box a running sandbox, made and empty if it has none.
func (r *remote) ensure(ctx context.Context, b *box, w *localWorkspace) error {
	if b.id != "" {
		return nil
	}
	id, exec, err := r.create(ctx, strings.TrimPrefix(w.id, w.l.name+"-"), w.tenant)
	if err != nil {
		return err
	}
	b.id, b.exec = id, exec
	b.sent, b.listed, b.listedAt = map[string]localFile{}, map[string]remoteFile{}, time.Time{}
	return nil
}

// discard deletes the box's sandbox, if any, and forgets it. The caller
// holds b.mu.
func (r *remote) discard(ctx context.Context, b *box) error {
	if b.id == "" {
		return nil
	}
	id := b.id
	b.id, b.exec, b.sent, b.listed = "", nil, nil, nil
	return r.delete(ctx, id)
}

// push sends the sandbox what changed in the workspace since the last sync,
// and lists the sandbox's files if it sent anything.
func (r *remote) push(ctx context.Context, b *box, w *localWorkspace) error {
	if err := r.ensure(ctx, b, w); err != nil {
		return err
	}
	now, err := scan(w.dir)
	if err != nil {
		return fmt.Errorf("scan the workspace: %w", err)
	}
	var send []string
	for p, f := range now {
		old, ok := b.sent[p]
		if ok && same(old, f) && !racyLocal(old) {
			continue
		}
		if ok && same(old, f) {
			if sum, err := digest(filepath.Join(w.dir, p)); err == nil && sum == old.sum {
				continue
			}
		}
		send = append(send, p)
	}
	var gone []string
	for p := range b.sent {
		if _, ok := now[p]; !ok {
			gone = append(gone, p)
		}
	}
	if len(send) == 0 && len(gone) == 0 {
		return nil
	}
	slices.Sort(send)
	slices.Sort(gone)
	if err := r.remove(ctx, b, gone); err != nil {
		return err
	}
	for _, p := range gone {
		delete(b.sent, p)
	}
	if err := r.upload(ctx, b, w.dir, send, now); err != nil {
		return err
	}
	listed, at, err := r.list(ctx, b)
	if err != nil {
		return err
	}
	b.listed, b.listedAt = listed, at
	return nil
}

// pull brings what the command changed in the sandbox into the workspace.
// Every path of the listing is checked, and every changed file downloaded
// within the limits, before anything is written.
func (r *remote) pull(ctx context.Context, b *box, w *localWorkspace) error {
	listed, at, err := r.list(ctx, b)
	if err != nil {
		return err
	}
	var fetch []string
	for p, f := range listed {
		old, ok := b.listed[p]
		if !ok || old.size != f.size || !old.mod.Equal(f.mod) || old.exec != f.exec || !old.mod.Before(b.listedAt.Add(-remoteRacy)) {
			fetch = append(fetch, p)
		}
	}
	var gone []string
	for p := range b.listed {
		if _, ok := listed[p]; !ok {
			gone = append(gone, p)
		}
	}
	slices.Sort(fetch)
	slices.Sort(gone)

	root, err := os.OpenRoot(w.dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, p := range append(slices.Clone(fetch), gone...) {
		if err := writable(root, p); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp(w.l.runs, "pull-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	total := int64(0)
	sums := make([][sha256.Size]byte, len(fetch))
	for i, p := range fetch {
		n, sum, err := r.download(ctx, b, p, filepath.Join(tmp, strconv.Itoa(i)), r.cfg.MaxBytes-total)
		if err != nil {
			return err
		}
		total += n
		sums[i] = sum
	}

	for i, p := range fetch {
		if err := place(root, p, filepath.Join(tmp, strconv.Itoa(i)), listed[p].exec); err != nil {
			return fmt.Errorf("write %q into the workspace: %w", p, err)
		}
	}
	for _, p := range gone {
		if fi, err := root.Lstat(p); err == nil && fi.Mode().IsRegular() {
			if err := root.Remove(p); err != nil {
				return fmt.Errorf("delete %q from the workspace: %w", p, err)
			}
		}
		delete(b.sent, p)
	}
	// What the workspace now holds of the sandbox's files, as sent.
	now, err := scan(w.dir)
	if err != nil {
		return err
	}
	for i, p := range fetch {
		if f, ok := now[p]; ok {
			f.sum = sums[i]
			b.sent[p] = f
		}
	}
	b.listed, b.listedAt = listed, at
	return nil
}

// writable checks that p, a checked relative path, can be written in the
// workspace without following a symbolic link and without replacing a
// directory.
func writable(root *os.Root, p string) error {
	parts := strings.Split(p, "/")
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		fi, err := root.Lstat(sub)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return &PathError{Path: p, Reason: "the remote sandbox names it, and the workspace cannot tell what it is: " + err.Error()}
		}
		switch last := i == len(parts)-1; {
		case fi.Mode()&fs.ModeSymlink != 0:
			return &PathError{Path: p, Reason: "the remote sandbox names it, and " + sub + " is a symbolic link in the workspace"}
		case !last && !fi.IsDir():
			return &PathError{Path: p, Reason: "the remote sandbox names it, and " + sub + " is not a directory in the workspace"}
		case last && !fi.Mode().IsRegular():
			return &PathError{Path: p, Reason: "the remote sandbox names it as a file, and it is not a regular file in the workspace"}
		}
	}
	return nil
}

// place writes a downloaded file into the workspace through root.
func place(root *os.Root, p, from string, exec bool) error {
	if dir := path.Dir(p); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	mode := fs.FileMode(0o644)
	if exec {
		mode = 0o755
	}
	dst, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Close(); err != nil {
		return err
	}
	return root.Chmod(p, mode)
}

// checkListed turns a path a listing names into one relative to the
// workspace, or says why it may not be written there.
func (r *remote) checkListed(abs string) (string, error) {
	bad := func(reason string) (string, error) {
		return "", &PathError{Path: clip(abs), Reason: "the remote sandbox lists it, and it " + reason}
	}
	if strings.IndexByte(abs, 0) >= 0 {
		return bad("contains a NUL byte")
	}
	rel, ok := strings.CutPrefix(abs, r.cfg.WorkDir+"/")
	if !ok {
		if !strings.HasPrefix(abs, "/") {
			return bad("is not absolute")
		}
		return bad("is outside the workspace " + r.cfg.WorkDir)
	}
	if rel == "" || strings.HasPrefix(rel, "/") || cleanSlash(rel) != rel {
		return bad("is not a clean path")
	}
	if rel == ".." || strings.HasPrefix(rel, "../") || strings.Contains(rel, "/../") || strings.HasSuffix(rel, "/..") {
		return bad("leaves the workspace")
	}
	if inGitDir(rel) {
		return bad("is in .git, which is off limits")
	}
	return rel, nil
}

// cleanSlash is path.Clean, which keeps a trailing "/." or "//" from
// passing as clean.
func cleanSlash(p string) string { return path.Clean(p) }

// fileInfo is execd's FileInfo, of which the remote backend reads these.
type fileInfo struct {
	Path     string    `json:"path"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified_at"`
	Mode     int       `json:"mode"`
}

// list asks for every file under the sandbox's workspace directory and
// checks each path; it returns the files and when the service listed them.
func (r *remote) list(ctx context.Context, b *box) (map[string]remoteFile, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	resp, err := r.do(ctx, b.exec.JoinPath("files", "search"), http.MethodGet, url.Values{"path": {r.cfg.WorkDir}, "pattern": {"**"}}, nil, "")
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("list files: %w", err)
	}
	defer resp.Body.Close()
	at, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		at = time.Now()
	}
	// A listing's entry is a path and a few numbers: 1 KiB each is ample.
	max := int64(r.cfg.MaxEntries) << 10
	raw, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("list files: %w", err)
	}
	if int64(len(raw)) > max {
		return nil, time.Time{}, fmt.Errorf("list files: the answer is larger than %d bytes", max)
	}
	var infos []fileInfo
	if err := json.Unmarshal(raw, &infos); err != nil {
		return nil, time.Time{}, fmt.Errorf("list files: malformed JSON answer: %w", err)
	}
	if len(infos) > r.cfg.MaxEntries {
		return nil, time.Time{}, fmt.Errorf("list files: %d files, more than the %d allowed", len(infos), r.cfg.MaxEntries)
	}
	out := make(map[string]remoteFile, len(infos))
	for _, fi := range infos {
		rel, err := r.checkListed(fi.Path)
		if err != nil {
			return nil, time.Time{}, err
		}
		if fi.Size < 0 || fi.Size > r.cfg.MaxFileBytes {
			return nil, time.Time{}, fmt.Errorf("list files: %q has %d bytes, over the %d allowed", rel, fi.Size, r.cfg.MaxFileBytes)
		}
		// The mode is octal digits written as a decimal number (755).
		out[rel] = remoteFile{size: fi.Size, mod: fi.Modified, exec: fi.Mode >= 0 && fi.Mode/100%10&1 == 1}
	}
	return out, at, nil
}

// download fetches one file into a local path outside the workspace, at
// most MaxFileBytes and room bytes.
func (r *remote) download(ctx context.Context, b *box, rel, to string, room int64) (int64, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	resp, err := r.do(ctx, b.exec.JoinPath("files", "download"), http.MethodGet, url.Values{"path": {r.cfg.WorkDir + "/" + rel}}, nil, "")
	if err != nil {
		return 0, sum, fmt.Errorf("download %q: %w", rel, err)
	}
	defer resp.Body.Close()
	f, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, sum, err
	}
	defer f.Close()
	max := min(r.cfg.MaxFileBytes, room)
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(resp.Body, max+1))
	if err != nil {
		return 0, sum, fmt.Errorf("download %q: %w", rel, err)
	}
	if n > max {
		return 0, sum, fmt.Errorf("download %q: over the %d bytes a file may have (%d per command)", rel, r.cfg.MaxFileBytes, r.cfg.MaxBytes)
	}
	return n, [sha256.Size]byte(h.Sum(nil)), f.Close()
}

// uploadBatch bounds the bytes of one upload request (a larger file goes
// alone).
const uploadBatch = 16 << 20

// upload sends files of the workspace to the sandbox, in batches, and
// records them as sent.
func (r *remote) upload(ctx context.Context, b *box, dir string, paths []string, now map[string]localFile) error {
	for len(paths) > 0 {
		n, size := 0, int64(0)
		for n < len(paths) && (n == 0 || size+now[paths[n]].size <= uploadBatch) {
			size += now[paths[n]].size
			n++
		}
		if err := r.uploadOnce(ctx, b, dir, paths[:n], now); err != nil {
			return err
		}
		paths = paths[n:]
	}
	return nil
}

func (r *remote) uploadOnce(ctx context.Context, b *box, dir string, paths []string, now map[string]localFile) error {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	sums := make(map[string][sha256.Size]byte, len(paths))
	written := make(chan error, 1)
	go func() {
		written <- func() error {
			for _, p := range paths {
				f := now[p]
				mode := 644
				if f.mode&0o100 != 0 {
					mode = 755
				}
				meta, _ := json.Marshal(map[string]any{"path": r.cfg.WorkDir + "/" + p, "mode": mode})
				h := textproto.MIMEHeader{}
				h.Set("Content-Disposition", `form-data; name="metadata"`)
				h.Set("Content-Type", "application/json")
				part, err := mw.CreatePart(h)
				if err != nil {
					return err
				}
				if _, err := part.Write(meta); err != nil {
					return err
				}
				if part, err = mw.CreateFormFile("file", path.Base(p)); err != nil {
					return err
				}
				src, err := os.Open(filepath.Join(dir, p))
				if err != nil {
					return err
				}
				h2 := sha256.New()
				_, err = io.Copy(io.MultiWriter(part, h2), io.LimitReader(src, f.size))
				src.Close()
				if err != nil {
					return err
				}
				sums[p] = [sha256.Size]byte(h2.Sum(nil))
			}
			return mw.Close()
		}()
		pw.Close()
	}()
	err := r.call(ctx, b.exec.JoinPath("files", "upload"), http.MethodPost, nil, pr, mw.FormDataContentType(), nil, 0)
	// A service that answered before reading the whole body did not get
	// every file: closing the pipe ends the writer, which then says so.
	pr.CloseWithError(errors.New("the service answered before reading the whole upload"))
	if werr := <-written; err == nil && werr != nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("upload %d file(s): %w", len(paths), err)
	}
	for _, p := range paths {
		f := now[p]
		f.sum = sums[p]
		b.sent[p] = f
	}
	return nil
}

// remove deletes files of the sandbox that the workspace no longer has.
func (r *remote) remove(ctx context.Context, b *box, paths []string) error {
	for len(paths) > 0 {
		n := min(len(paths), 100)
		q := url.Values{}
		for _, p := range paths[:n] {
			q.Add("path", r.cfg.WorkDir+"/"+p)
		}
		if err := r.call(ctx, b.exec.JoinPath("files"), http.MethodDelete, q, nil, "", nil, 0); err != nil {
			return fmt.Errorf("delete %d file(s): %w", n, err)
		}
		paths = paths[n:]
	}
	return nil
}

// command runs the script in the sandbox and reads its stream into a
// Result. The service enforces the timeout; the runner's own deadline, a
// grace later, interrupts a command the service let run on.
func (r *remote) command(ctx context.Context, b *box, script string, timeout time.Duration, capBytes int64) (Result, error) {
	body, _ := json.Marshal(map[string]any{"command": script, "cwd": r.cfg.WorkDir, "timeout": timeout.Milliseconds()})
	began := time.Now()
	cctx, cancel := context.WithTimeout(ctx, timeout+commandGrace)
	defer cancel()
	stdout, stderr := &capture{limit: capBytes}, &capture{limit: capBytes}
	resp, err := r.do(cctx, b.exec.JoinPath("command"), http.MethodPost, nil, bytes.NewReader(body), "application/json")
	var out outcome
	if err == nil {
		out, err = stream(resp.Body, stdout, stderr)
		resp.Body.Close()
	}
	res := Result{Duration: time.Since(began)}
	switch {
	case err != nil && ctx.Err() == nil && cctx.Err() != nil:
		// The service did not end the command by its timeout: stop it.
		if out.session != "" {
			ictx, icancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			_ = r.call(ictx, b.exec.JoinPath("command"), http.MethodDelete, url.Values{"id": {out.session}}, nil, "", nil, 0)
			icancel()
		}
		res.TimedOut, res.Killed, res.ExitCode = true, true, 128+int(syscall.SIGKILL)
	case err != nil:
		return Result{}, err
	case out.failed:
		res.ExitCode = out.exitCode
		if out.message != "" {
			fmt.Fprintf(stderr, "\nrath: the remote sandbox reported %s\n", clip(out.message))
		}
		res.Killed = res.ExitCode > 128 && res.ExitCode <= 128+64
		res.TimedOut = res.Killed && res.Duration >= timeout
	}
	res.Stdout, res.StdoutBytes = string(stdout.buf), stdout.total
	res.Stderr, res.StderrBytes = string(stderr.buf), stderr.total
	res.Truncated = stdout.total > int64(len(stdout.buf)) || stderr.total > int64(len(stderr.buf))
	return res, nil
}

// commandGrace is how long after its timeout the runner waits for the
// service to end a command.
const commandGrace = 30 * time.Second

// scan lists the workspace's regular files but .git's, with their identity.
// Symbolic links are not sent: the API has no way to make one.
func scan(dir string) (map[string]localFile, error) {
	out := map[string]localFile{}
	taken := time.Now().UnixNano()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == ".git" {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return errors.New("no inode metadata")
		}
		out[filepath.ToSlash(rel)] = localFile{size: info.Size(), mode: info.Mode(), ino: st.Ino,
			mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(), taken: taken}
		return nil
	})
	return out, err
}

// same reports whether two identities of a file are the same (the digest
// aside).
func same(a, b localFile) bool {
	return a.size == b.size && a.mode == b.mode && a.ino == b.ino && a.mtime == b.mtime && a.ctime == b.ctime
}

// racyLocal reports whether a file's identity was read so soon after its
// last change that a later write within the same clock tick could have
// left it as it was (tree.go): such a file is compared by content.
func racyLocal(f localFile) bool {
	return f.taken-max(f.mtime, f.ctime) < int64(racyWindow)
}

// digest is a file's SHA-256.
func digest(p string) ([sha256.Size]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return [sha256.Size]byte{}, err
	}
	return [sha256.Size]byte(h.Sum(nil)), nil
}
