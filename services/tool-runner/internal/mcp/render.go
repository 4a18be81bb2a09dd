package mcp

import (
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// render turns a call's content into the text the model reads: text as is,
// each other kind of content as a one-line summary in brackets, one part a
// line. A result with structured content only is rendered as its JSON.
func render(res *sdk.CallToolResult) string {
	parts := make([]string, 0, len(res.Content))
	for _, c := range res.Content {
		parts = append(parts, part(c))
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(b))
		}
	}
	return strings.ToValidUTF8(strings.Join(parts, "\n"), "\uFFFD")
}

func part(c sdk.Content) string {
	switch c := c.(type) {
	case *sdk.TextContent:
		return c.Text
	case *sdk.ImageContent:
		return fmt.Sprintf("[image: %s, %d bytes]", c.MIMEType, len(c.Data))
	case *sdk.AudioContent:
		return fmt.Sprintf("[audio: %s, %d bytes]", c.MIMEType, len(c.Data))
	case *sdk.ResourceLink:
		return fmt.Sprintf("[resource link: %s%s]", c.URI, named(c.Name, c.MIMEType))
	case *sdk.EmbeddedResource:
		r := c.Resource
		switch {
		case r == nil:
			return "[resource]"
		case r.Text != "":
			return fmt.Sprintf("[resource: %s%s]\n%s", r.URI, named("", r.MIMEType), r.Text)
		default:
			return fmt.Sprintf("[resource: %s%s, %d bytes]", r.URI, named("", r.MIMEType), len(r.Blob))
		}
	}
	return fmt.Sprintf("[%T content]", c)
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
