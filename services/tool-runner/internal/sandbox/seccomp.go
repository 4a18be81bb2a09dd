package sandbox

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The isolating backend gives bwrap a seccomp filter (--seccomp), which it
// installs last, after it has set the sandbox up and right before it
// executes the command: the filter binds the command and everything it
// starts, never bwrap's own setup. The filter is a deny list, not an allow
// list: commands are compilers, test suites and interpreters whose system
// calls no list could foresee, and the sandbox's namespaces and dropped
// capabilities already refuse most of what is denied here. The filter is
// the second wall: it refuses the system calls whose kernel code has been
// the way out of sandboxes like this one (user namespaces, io_uring, bpf,
// keyrings) even where a capability or a namespace would have allowed
// them, and those that reach another process (ptrace).

// deniedCalls are refused with EPERM, what a command sees when it lacks
// the privilege, so that it reports "operation not permitted" rather than
// crashing on an unknown call.
var deniedCalls = []string{
	// Reaching into another process.
	"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd",
	// Mounts and namespaces: bwrap has made every one the command needs.
	"mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
	"mount_setattr", "unshare", "setns",
	// The kernel's keyrings, shared by the host's users.
	"keyctl", "add_key", "request_key",
	// Kernel programs, tracing and modules.
	"bpf", "perf_event_open", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	// The machine's state.
	"swapon", "swapoff", "reboot", "acct", "quotactl", "settimeofday", "clock_settime", "clock_adjtime",
	"adjtimex", "iopl", "ioperm", "syslog", "vhangup",
	// Files by handle (the container escape of 2014) and page faults
	// handled in user space (the usual way to win a kernel race).
	"open_by_handle_at", "userfaultfd",
	// io_uring: a second system-call interface the filter cannot see into,
	// the source of many kernel exploits; runtimes that use it fall back to
	// ordinary calls when it is refused.
	"io_uring_setup", "io_uring_enter", "io_uring_register",
}

// namespaceFlags are clone(2)'s flags that make new namespaces
// (CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER,
// CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWTIME): a clone with any is refused.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWTIME

// personalities are the personality(2) values a command may set: the
// ones Docker's default profile allows (Linux, its 32-bit variant, and the
// query), and ADDR_NO_RANDOMIZE, with which the race detector and the
// sanitizers re-execute themselves where the kernel randomises mappings
// more than their memory layout allows (it weakens the command's own
// defences, not the sandbox). Any other (READ_IMPLIES_EXEC, which makes
// every readable mapping executable) is refused.
var personalities = []uint64{0, 0x8, 0x20000, 0x20008, 0x0040000, 0xffffffff}

// seccompFilter is the compiled filter, as bwrap reads it: struct
// sock_filter instructions in the machine's byte order.
type seccompFilter struct {
	prog     []byte
	summary  string // for Result.Limits
	describe string // for a placement's isolation
}

var (
	filterOnce sync.Once
	filter     seccompFilter
	filterErr  error
)

// sandboxFilter returns the filter, compiled once.
func sandboxFilter() (seccompFilter, error) {
	filterOnce.Do(func() { filter, filterErr = compileFilter() })
	return filter, filterErr
}

// compileFilter assembles the filter. Calls of another architecture's ABI
// than the runner's (32-bit calls through int 0x80 on amd64) are refused
// outright with ENOSYS: their numbers differ, so a deny list of this
// architecture's numbers would not see them. clone3 also gets ENOSYS: its
// flags are in memory the filter cannot read, and C libraries fall back to
// clone, whose flags it can.
func compileFilter() (seccompFilter, error) {
	native, err := arch.GetInfo("")
	if err != nil {
		return seccompFilter{}, fmt.Errorf("seccomp: %w", err)
	}
	var personality seccomp.ArgumentConditions
	for _, p := range personalities {
		personality = append(personality, seccomp.Condition{Argument: 0, Operation: seccomp.NotEqual, Value: p})
	}
	policy := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno, Names: deniedCalls, NamesWithCondtions: []seccomp.NameWithConditions{
				{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: namespaceFlags}}},
				{Name: "personality", Conditions: personality},
			}},
			{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: []string{"clone3"}},
		},
	}
	insns, err := policy.Assemble()
	if err != nil {
		return seccompFilter{}, fmt.Errorf("seccomp: %w", err)
	}
	// The policy's own architecture check lets a foreign ABI through to the
	// default action (allow): this one, first, refuses it.
	prefix := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(native.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionErrno) | uint32(unix.ENOSYS)},
	}
	raw, err := bpf.Assemble(append(prefix, insns...))
	if err != nil {
		return seccompFilter{}, fmt.Errorf("seccomp: %w", err)
	}
	prog := make([]byte, 0, 8*len(raw))
	for _, in := range raw {
		prog = binary.NativeEndian.AppendUint16(prog, in.Op)
		prog = append(prog, in.Jt, in.Jf)
		prog = binary.NativeEndian.AppendUint32(prog, in.K)
	}
	n := len(deniedCalls) + 3 // and clone with namespace flags, personality, clone3
	return seccompFilter{prog: prog, summary: fmt.Sprintf("seccomp=%d-calls-denied", n),
		describe: fmt.Sprintf("seccomp filter: %d system calls denied with EPERM (ptrace, mount, unshare and namespace clones, keyrings, bpf, io_uring, modules…), 32-bit calls refused", n)}, nil
}

// Filter describes the system-call filter the backend's commands run
// under, empty for none (the local backend).
func (l *Local) Filter() string {
	if l.iso == nil || l.iso.gv != nil {
		return "" // local runs no filter; on gvisor, gVisor's kernel serves the calls
	}
	f, err := sandboxFilter()
	if err != nil {
		return "no seccomp filter: " + err.Error()
	}
	return f.describe
}

// file returns the filter as the read end of a pipe, for bwrap's
// --seccomp: the program is far below a pipe's capacity, so it is written
// whole and the write end closed before bwrap reads it.
func (f seccompFilter) file() (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	defer w.Close()
	if _, err := w.Write(f.prog); err != nil {
		r.Close()
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	return r, nil
}
