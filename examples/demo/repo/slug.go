// Package slug turns titles into URL path segments.
package slug

import "strings"

// Make returns the slug of a title.
func Make(title string) string {
	return strings.ReplaceAll(title, " ", "-")
}
