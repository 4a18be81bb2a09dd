package dossiertest

import (
	"bufio"
	"bytes"
	stdhtml "html"
	"strings"
	"testing"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/renderer/html"
	"github.com/yuin/goldmark/text"
)

// Table is a table of a Markdown document as a GitHub-flavoured renderer
// reads it: the header's cells and each row's, as the text they show.
type Table struct {
	Header []string
	Rows   [][]string
}

// Column is the index of the header cell named name (-1: none).
func (tb Table) Column(name string) int {
	for i, h := range tb.Header {
		if h == name {
			return i
		}
	}
	return -1
}

// Tables parses md as GitHub-flavoured Markdown (goldmark with its GFM
// extension) and returns its tables, in document order. A renderer pads a
// row with fewer cells than its header and drops the cells of a longer
// one, so the parsed table cannot tell a broken row: Tables also counts
// each row's cells in the source and fails t where a row's count is not
// its header's.
func Tables(t testing.TB, md []byte) []Table {
	t.Helper()
	checkRowWidths(t, md)
	doc := goldmark.New(goldmark.WithExtensions(extension.GFM)).Parser().Parse(text.NewReader(md))
	var out []Table
	err := ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		tn, ok := n.(*east.Table)
		if !entering || !ok {
			return ast.WalkContinue, nil
		}
		var tb Table
		for r := tn.FirstChild(); r != nil; r = r.NextSibling() {
			var cells []string
			for c := r.FirstChild(); c != nil; c = c.NextSibling() {
				cells = append(cells, strings.TrimSpace(inlineText(c, md)))
			}
			if _, header := r.(*east.TableHeader); header {
				tb.Header = cells
			} else {
				tb.Rows = append(tb.Rows, cells)
			}
		}
		out = append(out, tb)
		return ast.WalkSkipChildren, nil
	})
	if err != nil {
		t.Fatalf("walk the Markdown: %v", err)
	}
	return out
}

// Text is the text md shows outside its tables and code blocks, as a
// GitHub-flavoured renderer reads it, one block a line.
func Text(t testing.TB, md []byte) string {
	t.Helper()
	doc := goldmark.New(goldmark.WithExtensions(extension.GFM)).Parser().Parse(text.NewReader(md))
	var b strings.Builder
	err := ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		switch n.(type) {
		case *east.Table, *ast.FencedCodeBlock, *ast.CodeBlock:
			return ast.WalkSkipChildren, nil
		case *ast.Paragraph, *ast.Heading, *ast.TextBlock:
			if entering {
				b.WriteString(inlineText(n, md))
				b.WriteByte('\n')
			}
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	if err != nil {
		t.Fatalf("walk the Markdown: %v", err)
	}
	return b.String()
}

// CodeBlocks are the contents of md's fenced code blocks, in order.
func CodeBlocks(t testing.TB, md []byte) []string {
	t.Helper()
	doc := goldmark.New(goldmark.WithExtensions(extension.GFM)).Parser().Parse(text.NewReader(md))
	var out []string
	err := ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if cb, ok := n.(*ast.FencedCodeBlock); ok && entering {
			var b bytes.Buffer
			for i := 0; i < cb.Lines().Len(); i++ {
				seg := cb.Lines().At(i)
				b.Write(seg.Value(md))
			}
			out = append(out, b.String())
		}
		return ast.WalkContinue, nil
	})
	if err != nil {
		t.Fatalf("walk the Markdown: %v", err)
	}
	return out
}

// inlineText is the text n's inline content shows: escapes and entities
// resolved as the HTML renderer resolves them, code spans as written, a
// line break as a space, raw HTML (<br>) as written.
func inlineText(n ast.Node, src []byte) string {
	var b strings.Builder
	var walk func(n ast.Node, code bool)
	walk = func(n ast.Node, code bool) {
		for c := n.FirstChild(); c != nil; c = c.NextSibling() {
			switch x := c.(type) {
			case *ast.Text:
				if code {
					b.Write(x.Value(src))
				} else {
					var buf bytes.Buffer
					w := bufio.NewWriter(&buf)
					html.DefaultWriter.Write(w, x.Value(src))
					_ = w.Flush()
					b.WriteString(stdhtml.UnescapeString(buf.String()))
				}
				if x.SoftLineBreak() || x.HardLineBreak() {
					b.WriteByte(' ')
				}
			case *ast.String:
				b.Write(x.Value)
			case *ast.RawHTML:
				for i := 0; i < x.Segments.Len(); i++ {
					seg := x.Segments.At(i)
					b.Write(seg.Value(src))
				}
			case *ast.AutoLink:
				b.Write(x.URL(src))
			case *ast.CodeSpan:
				walk(x, true)
			default:
				walk(c, code)
			}
		}
	}
	walk(n, false)
	return b.String()
}

// checkRowWidths fails t where a table row of md, counted in the source
// (cells between pipes that no backslash escapes), has another number of
// cells than the header above it.
func checkRowWidths(t testing.TB, md []byte) {
	t.Helper()
	header, fence := -1, ""
	for i, line := range strings.Split(string(md), "\n") {
		trimmed := strings.TrimSpace(line)
		if f := fenceOf(trimmed); f != "" && (fence == "" || strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, "`~") == "") {
			if fence == "" {
				fence = f
			} else {
				fence = ""
			}
			header = -1
			continue
		}
		if fence != "" {
			continue
		}
		if !strings.HasPrefix(trimmed, "|") {
			header = -1
			continue
		}
		n := cellCount(trimmed)
		if header < 0 {
			header = n
			continue
		}
		if n != header {
			t.Errorf("line %d of the Markdown: a table row of %d cells under a header of %d:\n%s", i+1, n, header, line)
		}
	}
}

// fenceOf is the fence a line opens or closes a code block with ("": none).
func fenceOf(line string) string {
	for _, c := range []string{"`", "~"} {
		n := len(line) - len(strings.TrimLeft(line, c))
		if n >= 3 {
			return strings.Repeat(c, n)
		}
	}
	return ""
}

// cellCount counts the cells of a table row: the pipes no backslash
// escapes, less the leading and trailing one.
func cellCount(row string) int {
	pipes := 0
	for i := 0; i < len(row); i++ {
		switch row[i] {
		case '\\':
			i++
		case '|':
			pipes++
		}
	}
	if !strings.HasSuffix(row, "|") || strings.HasSuffix(row, `\|`) {
		pipes++
	}
	return pipes - 1
}
