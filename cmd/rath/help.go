package main

import (
	"github.com/spf13/cobra"
)

// The groups rath --help lists its commands in, in this order.
var helpGroups = []*cobra.Group{
	{ID: "sessions", Title: "Sessions:"},
	{ID: "agents", Title: "Agents and workflows:"},
	{ID: "evidence", Title: "Evidence and audit:"},
	{ID: "operations", Title: "Running Rath:"},
}

// groupOf puts each command in its group of rath --help. A command not
// named here fails TestHelp.
var groupOf = map[string]string{
	"start": "sessions", "ls": "sessions", "state": "sessions", "log": "sessions", "watch": "sessions",
	"emit": "sessions", "fork": "sessions", "merge": "sessions", "graph": "sessions",
	"pause": "sessions", "resume": "sessions", "close": "sessions", "archive": "sessions", "compact": "sessions",

	"replay": "agents", "diff": "agents", "eval": "agents", "recheck": "agents", "to": "agents", "memory": "agents",
	"approvals": "agents", "approve": "agents", "reject": "agents", "mcp-proxy": "agents",

	"verify": "evidence", "export": "evidence", "audit": "evidence", "rejects": "evidence", "schema": "evidence",

	"up": "operations", "demo": "operations", "doctor": "operations", "creds": "operations", "console": "operations",
}

// examples are the Example sections of the main commands, each line a
// command as a user types it (TestHelp parses every one).
var examples = map[string]string{
	"up": `  rath up                                  # NATS on 127.0.0.1:4222, data in ./.rath/data, console on 127.0.0.1:9464
  rath up --listen 127.0.0.1:4223 --http 127.0.0.1:9465   # beside another runtime; clients add --nats nats://127.0.0.1:4223
  rath up --sandbox-allow-local            # let workflows and "rath to" put sessions on local (no isolation)
  rath up --nats nats://nats-1:4222        # the services only, on a NATS server or cluster you run`,
	"demo": `  rath demo                                # the software-task example end to end; its dossier in ./rath-demo
  rath demo --serve                        # then keep the runtime up: the console, rath log, rath graph
  rath demo --out /tmp/dossier --keep-data
  rath demo --provider openai --model gpt-4o-mini   # the same on a live model (OPENAI_API_KEY in this environment)`,
	"start": `  rath start --task "fix the failing test"                    # prints the new session's ID
  rath start --id demo --task "fix the failing test" --label team=core
  rath start --id fix --workflow examples/fix-calc/workflow.yaml --workspace examples/fix-calc/repo --task "make TestAdd pass"`,
	"state": `  rath state fix                           # status, usage by agent and model, tool evidence, sandbox
  rath state fix --at 12                   # as it was after event 12
  rath state fix --full --json             # the whole folded state`,
	"log": `  rath log fix                             # decisions, turns, model and tool calls, the close
  rath log fix --from 10 --limit 20
  rath log fix --json                      # every field, one stored event a line`,
	"watch": `  rath watch fix                           # its history, then live until interrupted
  rath watch fix --from 20 --json`,
	"verify": `  rath verify fix                          # the hash chain and signatures, through fork ancestry
  rath verify fix --key .rath/data/keys/ledger.pub    # trust only the ledger key you pinned
  rath verify --dossier rath-demo          # an exported dossier, offline
  rath verify --receipt receipt.json --key .rath/data/keys/ledger.pub`,
	"fork": `  rath fork demo --at 2 --id demo-b --reason "try another strategy"
  rath fork fix --at 16 --say "the test table is in calc_test.go"   # correct it there and resume`,
	"export": `  rath export fix --out dossier            # dossier.md, dossier.json, graph.html of fix's tree
  rath verify --dossier dossier            # checked offline, no NATS`,
	"doctor": `  rath doctor                              # this machine's sandboxes, then the rath up of this directory
  rath doctor --nats nats://nats-1:4222 --creds ./rath-creds/admin.nk
  rath doctor --sandbox bwrap --json`,
	"creds": `  rath creds add --tenant acme --user alice   # then kill -HUP the rath up process
  rath creds show
  rath creds token add --user acme/alice   # a model gateway API key acting as acme/alice, printed once
  rath creds mint --out ./rath-creds       # for a NATS server you run`,
}

// rootExample is the Example of rath itself: the first steps.
const rootExample = `  rath demo                                # see it work: the example end to end, in this process
  rath up                                  # a runtime; then, in another terminal:
  rath start --id fix --workflow examples/fix-calc/workflow.yaml --workspace examples/fix-calc/repo --task "make TestAdd pass"
  rath log fix
  rath verify fix`

// layoutHelp groups root's commands for rath --help and gives the main
// ones their examples (a command's own Example stays).
func layoutHelp(root *cobra.Command) {
	root.AddGroup(helpGroups...)
	root.Example = rootExample
	for _, c := range root.Commands() {
		if g, ok := groupOf[c.Name()]; ok {
			c.GroupID = g
		}
		if ex, ok := examples[c.Name()]; ok && c.Example == "" {
			c.Example = ex
		}
	}
}
