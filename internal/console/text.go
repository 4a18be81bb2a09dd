package console

import (
	"regexp"
	"strings"
)

// Markdown a task's first line may carry, taken off by plainLine.
var (
	mdLink     = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	mdStrong   = regexp.MustCompile(`(\*\*|__)(\S(?:.*?\S)?)(\*\*|__)`)
	mdEmphasis = regexp.MustCompile(`(^|[\s(])[*_](\S(?:[^*_]*\S)?)[*_]([\s).,:;!?]|$)`)
	mdLead     = regexp.MustCompile(`^\s*(?:#{1,6}\s+|>\s*|[-*+]\s+|\d+[.)]\s+|\[[ xX]\]\s+)+`)
)

// plainLine is the first line of markdown text that says something, as
// plain text: without heading, quote and list markers, emphasis, code
// backticks and link targets, so a list shows a task's title, not its
// source. At most n runes.
func plainLine(md string, n int) string {
	for line := range strings.Lines(md) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "```") || strings.Trim(line, "-=*_ ") == "" {
			continue // blank, a code fence, a rule or a heading's underline
		}
		line = mdLead.ReplaceAllString(line, "")
		line = mdLink.ReplaceAllString(line, "$1")
		line = mdStrong.ReplaceAllString(line, "$2")
		line = mdEmphasis.ReplaceAllString(line, "$1$2$3")
		line = strings.ReplaceAll(line, "`", "")
		if line = strings.TrimSpace(line); line != "" {
			return clipText(line, n)
		}
	}
	return ""
}
