package mcp

import (
	"encoding/json"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/openrath/rath/internal/mcpproxy"
)

// render turns a call's content into the text the model reads, as the MCP
// proxy renders what it records (mcpproxy.Render): text as is, each other
// kind of content as a one-line summary in brackets, one part a line; a
// result with structured content only as its JSON.
func render(res *sdk.CallToolResult) string {
	b, err := json.Marshal(res)
	if err != nil {
		return "[a result that does not encode: " + err.Error() + "]"
	}
	text, _ := mcpproxy.Render(b)
	return text
}
