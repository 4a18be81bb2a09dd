// Command server is a tiny MCP server over stdio for tests: echo, add, fail,
// crash, pid, env, write (a file in its working directory) and image.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type (
	echoArgs struct {
		Text string `json:"text" jsonschema:"the text to echo"`
	}
	addArgs struct {
		A int `json:"a"`
		B int `json:"b"`
	}
	writeArgs struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	}
	none struct{}
)

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func main() {
	s := mcp.NewServer(&mcp.Implementation{Name: "rath-test", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echo the text."}, func(_ context.Context, _ *mcp.CallToolRequest, in echoArgs) (*mcp.CallToolResult, any, error) {
		return text(in.Text), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Add two integers."}, func(_ context.Context, _ *mcp.CallToolRequest, in addArgs) (*mcp.CallToolResult, any, error) {
		return text(strconv.Itoa(in.A + in.B)), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Always fail."}, func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
		return nil, nil, errors.New("failing as asked")
	})
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "Exit at once."}, func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
		os.Exit(3)
		return nil, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "pid", Description: "The server's process ID."}, func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
		return text(strconv.Itoa(os.Getpid())), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "env", Description: "The server's environment and working directory."}, func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
		wd, _ := os.Getwd()
		return text("PWD=" + wd + "\n" + strings.Join(os.Environ(), "\n")), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "write", Description: "Write a file in the working directory."}, func(_ context.Context, _ *mcp.CallToolRequest, in writeArgs) (*mcp.CallToolResult, any, error) {
		if err := os.WriteFile(in.Path, []byte(in.Content), 0o644); err != nil {
			return nil, nil, err
		}
		return text(fmt.Sprintf("wrote %d bytes to %s", len(in.Content), in.Path)), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "image", Description: "A picture and a caption."}, func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: "a dot"},
			&mcp.ImageContent{MIMEType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'}},
		}}, nil, nil
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
