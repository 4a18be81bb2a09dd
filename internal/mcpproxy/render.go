package mcpproxy

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Render turns a tools/call result into the text its evidence keeps, the
// one rendering of an MCP server's result (the tool runner's of a
// workflow's servers too, docs/tools.md):
// text as is, each other kind of content as a one-line summary in
// brackets, one part a line; structured content alone is kept as its
// JSON, and a result of no known shape as it was sent. isError is the
// server's verdict that the call failed.
func Render(raw json.RawMessage) (text string, isError bool) {
	var res struct {
		Content []struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			Data     string `json:"data"`
			MIMEType string `json:"mimeType"`
			URI      string `json:"uri"`
			Name     string `json:"name"`
			Resource *struct {
				URI      string `json:"uri"`
				MIMEType string `json:"mimeType"`
				Text     string `json:"text"`
				Blob     string `json:"blob"`
			} `json:"resource"`
		} `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		IsError           bool            `json:"isError"`
	}
	if json.Unmarshal(raw, &res) != nil {
		return string(raw), false
	}
	parts := make([]string, 0, len(res.Content))
	for _, c := range res.Content {
		switch c.Type {
		case "text":
			parts = append(parts, c.Text)
		case "image", "audio":
			parts = append(parts, fmt.Sprintf("[%s: %s, %d bytes]", c.Type, c.MIMEType, decoded(c.Data)))
		case "resource_link":
			parts = append(parts, fmt.Sprintf("[resource link: %s%s]", c.URI, named(c.Name, c.MIMEType)))
		case "resource":
			r := c.Resource
			switch {
			case r == nil:
				parts = append(parts, "[resource]")
			case r.Text != "":
				parts = append(parts, fmt.Sprintf("[resource: %s%s]\n%s", r.URI, named("", r.MIMEType), r.Text))
			default:
				parts = append(parts, fmt.Sprintf("[resource: %s%s, %d bytes]", r.URI, named("", r.MIMEType), decoded(r.Blob)))
			}
		default:
			parts = append(parts, fmt.Sprintf("[%s content]", c.Type))
		}
	}
	if len(parts) == 0 && len(res.StructuredContent) > 0 {
		parts = append(parts, string(res.StructuredContent))
	}
	if len(parts) == 0 && res.Content == nil {
		return string(raw), res.IsError
	}
	return strings.ToValidUTF8(strings.Join(parts, "\n"), "\uFFFD"), res.IsError
}

// decoded is how many bytes base64 text b64 holds.
func decoded(b64 string) int {
	return len(b64)*3/4 - (len(b64) - len(strings.TrimRight(b64, "=")))
}

func named(name, mime string) string {
	var s string
	if name != "" {
		s += " (" + name + ")"
	}
	if mime != "" {
		s += ", " + mime
	}
	return s
}
