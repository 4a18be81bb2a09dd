package events

import (
	"bytes"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
)

// canonicalData writes the RFC 8785 form of the JSON value b, the data of an
// event, for the values events carry: objects with ASCII member names,
// arrays, strings, true, false, null and integers of up to 15 digits. A
// string that needs no escape is copied as it stands, so a long tool result
// costs one pass over its bytes instead of a character-by-character rewrite.
// It reports false for anything else (a fraction or exponent, -0, a member
// name with an escape or a non-ASCII character, a duplicate name, invalid
// UTF-8, a lone surrogate, malformed JSON), and the caller falls back to
// jcs.Transform, which also names what is wrong. TestCanonicalDataMatchesJCS
// holds the two together.
func canonicalData(b []byte) ([]byte, bool) {
	c := canonicalizer{in: b, out: make([]byte, 0, len(b))}
	if !c.value(0) {
		return nil, false
	}
	if c.skipSpace(); c.i != len(c.in) {
		return nil, false
	}
	return c.out, true
}

// canonicalDepth bounds nesting, as a decoder's stack would.
const canonicalDepth = 1000

var literals = [][]byte{[]byte("true"), []byte("false"), []byte("null")}

type canonicalizer struct {
	in  []byte
	i   int
	out []byte
}

func (c *canonicalizer) skipSpace() {
	for c.i < len(c.in) {
		switch c.in[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

func (c *canonicalizer) value(depth int) bool {
	if depth > canonicalDepth {
		return false
	}
	c.skipSpace()
	if c.i >= len(c.in) {
		return false
	}
	switch b := c.in[c.i]; {
	case b == '{':
		return c.object(depth)
	case b == '[':
		return c.array(depth)
	case b == '"':
		return c.string()
	case b == '-' || b >= '0' && b <= '9':
		return c.integer()
	}
	for _, lit := range literals {
		if bytes.HasPrefix(c.in[c.i:], lit) {
			c.out = append(c.out, lit...)
			c.i += len(lit)
			return true
		}
	}
	return false
}

// integer copies an integer that ECMAScript prints as it is written: no
// fraction or exponent, no leading zero, no -0, at most 15 digits (below
// 2^53, so exact as a double).
func (c *canonicalizer) integer() bool {
	start := c.i
	if c.in[c.i] == '-' {
		c.i++
	}
	digits := c.i
	for c.i < len(c.in) && c.in[c.i] >= '0' && c.in[c.i] <= '9' {
		c.i++
	}
	n := c.i - digits
	if n == 0 || n > 15 || n > 1 && c.in[digits] == '0' {
		return false
	}
	if c.i < len(c.in) {
		if b := c.in[c.i]; b == '.' || b == 'e' || b == 'E' {
			return false
		}
	}
	if n == 1 && c.in[digits] == '0' && digits > start {
		return false // -0 is written 0
	}
	c.out = append(c.out, c.in[start:c.i]...)
	return true
}

// string writes the string at c.i: copied as it stands when its escapes are
// the ones RFC 8785 writes, else decoded and written anew.
func (c *canonicalizer) string() bool {
	start := c.i
	c.i++
	canonical := true
	for ; c.i < len(c.in); c.i++ {
		switch b := c.in[c.i]; {
		case b == '"':
			c.i++
			tok := c.in[start:c.i]
			if canonical {
				if !utf8.Valid(tok) {
					return false
				}
				c.out = append(c.out, tok...)
				return true
			}
			s, ok := unquote(tok[1 : len(tok)-1])
			if !ok {
				return false
			}
			c.out = appendCanonicalString(c.out, s)
			return true
		case b == '\\':
			if c.i+1 >= len(c.in) {
				return false
			}
			canonical = canonical && canonicalEscape(c.in[c.i+1:])
			c.i++ // the escaped byte cannot end the string
		case b < 0x20:
			return false // not allowed unescaped in JSON
		}
	}
	return false
}

// canonicalEscape reports whether the escape whose letter starts b is
// written as RFC 8785 writes it: a short form, or \u00xx in lowercase for a
// control character that has none.
func canonicalEscape(b []byte) bool {
	switch b[0] {
	case '"', '\\', 'b', 'f', 'n', 'r', 't':
		return true
	case 'u':
		r, ok := hex4(b, 1)
		if !ok || r >= 0x20 || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t' {
			return false
		}
		const hex = "0123456789abcdef"
		return b[1] == '0' && b[2] == '0' && b[3] == hex[r>>4] && b[4] == hex[r&0xf]
	}
	return false
}

// unquote decodes the inside of a JSON string that has escapes; it reports
// false for a malformed escape, a lone surrogate or invalid UTF-8.
func unquote(b []byte) (string, bool) {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			out = append(out, b[i])
			continue
		}
		if i++; i >= len(b) {
			return "", false
		}
		switch b[i] {
		case '"', '\\', '/':
			out = append(out, b[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(b, i+1)
			if !ok {
				return "", false
			}
			i += 4
			if utf16.IsSurrogate(r) {
				if i+6 >= len(b) || b[i+1] != '\\' || b[i+2] != 'u' {
					return "", false
				}
				r2, ok := hex4(b, i+3)
				if !ok {
					return "", false
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return "", false
				}
				i += 6
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", false
		}
	}
	if !utf8.Valid(out) {
		return "", false
	}
	return string(out), true
}

func (c *canonicalizer) array(depth int) bool {
	c.i++ // [
	c.out = append(c.out, '[')
	c.skipSpace()
	if c.i < len(c.in) && c.in[c.i] == ']' {
		c.i++
		c.out = append(c.out, ']')
		return true
	}
	for {
		if !c.value(depth + 1) {
			return false
		}
		c.skipSpace()
		if c.i >= len(c.in) {
			return false
		}
		switch c.in[c.i] {
		case ',':
			c.i++
			c.out = append(c.out, ',')
		case ']':
			c.i++
			c.out = append(c.out, ']')
			return true
		default:
			return false
		}
	}
}

// object writes an object's members sorted by name. Names are plain ASCII
// (anything else falls back), whose byte order is RFC 8785's UTF-16 order.
func (c *canonicalizer) object(depth int) bool {
	c.i++ // {
	type member struct {
		name     []byte // without quotes
		from, to int    // the value's canonical bytes in c.out
	}
	var members []member
	mark := len(c.out)
	for first := true; ; first = false {
		c.skipSpace()
		if c.i >= len(c.in) {
			return false
		}
		if c.in[c.i] == '}' && first {
			c.i++
			break
		}
		if c.in[c.i] != '"' {
			return false
		}
		end := c.i + 1
		for end < len(c.in) && c.in[end] != '"' {
			if b := c.in[end]; b == '\\' || b < 0x20 || b >= utf8.RuneSelf {
				return false
			}
			end++
		}
		if end >= len(c.in) {
			return false
		}
		name := c.in[c.i+1 : end]
		c.i = end + 1
		c.skipSpace()
		if c.i >= len(c.in) || c.in[c.i] != ':' {
			return false
		}
		c.i++
		from := len(c.out)
		if !c.value(depth + 1) {
			return false
		}
		members = append(members, member{name, from, len(c.out)})
		c.skipSpace()
		if c.i >= len(c.in) {
			return false
		}
		if c.in[c.i] == '}' {
			c.i++
			break
		}
		if c.in[c.i] != ',' {
			return false
		}
		c.i++
	}
	slices.SortFunc(members, func(a, b member) int { return bytes.Compare(a.name, b.name) })
	for i := 1; i < len(members); i++ {
		if bytes.Equal(members[i-1].name, members[i].name) {
			return false
		}
	}
	// The values were written in input order after mark: write them again
	// in sorted order, then move them down over the input-order copy.
	values := c.out[mark:]
	size := 2
	for _, m := range members {
		size += len(m.name) + 4 + m.to - m.from
	}
	sorted := make([]byte, 0, size)
	sorted = append(sorted, '{')
	for i, m := range members {
		if i > 0 {
			sorted = append(sorted, ',')
		}
		sorted = append(sorted, '"')
		sorted = append(sorted, m.name...)
		sorted = append(sorted, '"', ':')
		sorted = append(sorted, values[m.from-mark:m.to-mark]...)
	}
	sorted = append(sorted, '}')
	if mark == 0 {
		c.out = sorted // the whole value: no need to move it down
	} else {
		c.out = append(c.out[:mark], sorted...)
	}
	return true
}
