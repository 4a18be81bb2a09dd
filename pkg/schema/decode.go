package schema

import (
	"encoding/json"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/openrath/rath/internal/jsonscan"
)

// maxDepth is encoding/json's nesting limit: deeper values are left to it,
// so that they are refused with its message.
const maxDepth = 10000

// decode decodes one JSON value into what jsonschema.UnmarshalJSON returns
// (encoding/json with UseNumber): map[string]any, []any, json.Number,
// string, bool or nil. It exists for speed: an event's data is mostly long
// strings, which encoding/json scans twice (a syntax check, then the
// decode) a byte at a time; here a string without escapes is one scan and
// one copy. ok is false for anything it does not decode as encoding/json
// would (bad syntax, too deep): the caller then asks encoding/json, which
// names the problem. FuzzDecode holds it equal to encoding/json.
func decode(b []byte) (v any, ok bool) {
	d := decoder{b: b}
	v = d.value(0)
	if d.bad {
		return nil, false
	}
	if d.skipSpace(); d.i != len(d.b) {
		return nil, false // something after the value
	}
	return v, true
}

type decoder struct {
	b   []byte
	i   int
	bad bool
}

func (d *decoder) skipSpace() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) fail() any {
	d.bad = true
	return nil
}

func (d *decoder) value(depth int) any {
	if depth >= maxDepth {
		return d.fail()
	}
	d.skipSpace()
	if d.i >= len(d.b) {
		return d.fail()
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		s, ok := d.string()
		if !ok {
			return d.fail()
		}
		return s
	case c == 't':
		return d.literal("true", true)
	case c == 'f':
		return d.literal("false", false)
	case c == 'n':
		return d.literal("null", nil)
	case c == '-' || ('0' <= c && c <= '9'):
		return d.number()
	}
	return d.fail()
}

func (d *decoder) literal(word string, v any) any {
	if len(d.b)-d.i < len(word) || string(d.b[d.i:d.i+len(word)]) != word {
		return d.fail()
	}
	d.i += len(word)
	return v
}

func (d *decoder) object(depth int) any {
	m := map[string]any{}
	d.i++ // {
	d.skipSpace()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return m
	}
	for {
		d.skipSpace()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return d.fail()
		}
		k, ok := d.string()
		if !ok {
			return d.fail()
		}
		d.skipSpace()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return d.fail()
		}
		d.i++
		v := d.value(depth + 1)
		if d.bad {
			return nil
		}
		m[k] = v // the last of a repeated name wins, as in encoding/json
		if !d.more('}') {
			if d.bad {
				return nil
			}
			return m
		}
	}
}

// more takes what follows a member or an element: a comma (true: another
// follows) or the closing bracket (false); anything else fails.
func (d *decoder) more(closing byte) bool {
	d.skipSpace()
	switch {
	case d.i < len(d.b) && d.b[d.i] == ',':
		d.i++
		return true
	case d.i < len(d.b) && d.b[d.i] == closing:
		d.i++
		return false
	}
	d.bad = true
	return false
}

func (d *decoder) array(depth int) any {
	a := []any{}
	d.i++ // [
	d.skipSpace()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return a
	}
	for {
		v := d.value(depth + 1)
		if d.bad {
			return nil
		}
		a = append(a, v)
		if !d.more(']') {
			if d.bad {
				return nil
			}
			return a
		}
	}
}

// number takes a number in JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (d *decoder) number() any {
	start := d.i
	if d.b[d.i] == '-' {
		d.i++
	}
	switch {
	case d.i < len(d.b) && d.b[d.i] == '0':
		d.i++
	case d.digits() == 0:
		return d.fail()
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if d.digits() == 0 {
			return d.fail()
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if d.digits() == 0 {
			return d.fail()
		}
	}
	return json.Number(d.b[start:d.i])
}

func (d *decoder) digits() int {
	n := 0
	for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
		d.i++
		n++
	}
	return n
}

// string takes the string at d.i (its opening quote). A string of
// printable ASCII or valid UTF-8 without escapes is copied as it is; any
// other is unquoted as encoding/json does it: escapes resolved, a lone or
// broken surrogate and each byte of invalid UTF-8 replaced by U+FFFD.
func (d *decoder) string() (string, bool) {
	start := d.i + 1
	i, ascii := start, true
	for ; i < len(d.b); i++ {
		c := d.b[i]
		if c == '"' {
			break
		}
		if c == '\\' || c < ' ' {
			return d.unquote(start)
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	if i >= len(d.b) {
		return "", false
	}
	if !ascii && !utf8.Valid(d.b[start:i]) {
		return d.unquote(start)
	}
	d.i = i + 1
	return string(d.b[start:i]), true
}

func (d *decoder) unquote(start int) (string, bool) {
	size := 64
	if end := jsonscan.StringEnd(d.b, start-1); end > start {
		size = end - start // at least what it unquotes to, but for U+FFFDs
	}
	var out strings.Builder // whose String does not copy
	out.Grow(size)
	for i := start; i < len(d.b); {
		c := d.b[i]
		switch {
		case c == '"':
			d.i = i + 1
			return out.String(), true
		case c < ' ':
			return "", false
		case c == '\\':
			if i+1 >= len(d.b) {
				return "", false
			}
			switch e := d.b[i+1]; e {
			case '"', '\\', '/':
				out.WriteByte(e)
			case 'b':
				out.WriteByte('\b')
			case 'f':
				out.WriteByte('\f')
			case 'n':
				out.WriteByte('\n')
			case 'r':
				out.WriteByte('\r')
			case 't':
				out.WriteByte('\t')
			case 'u':
				r := hex4(d.b[i+2:])
				if r < 0 {
					return "", false
				}
				i += 6
				if utf16.IsSurrogate(r) {
					if i+1 < len(d.b) && d.b[i] == '\\' && d.b[i+1] == 'u' {
						if r2 := hex4(d.b[i+2:]); r2 >= 0 {
							if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
								out.WriteRune(dec)
								i += 6
								continue
							}
						}
					}
					r = utf8.RuneError
				}
				out.WriteRune(r)
				continue
			default:
				return "", false
			}
			i += 2
		case c < utf8.RuneSelf:
			j := i + 1 // a run of plain ASCII, copied at once
			for j < len(d.b) && d.b[j] >= ' ' && d.b[j] < utf8.RuneSelf && d.b[j] != '"' && d.b[j] != '\\' {
				j++
			}
			out.Write(d.b[i:j])
			i = j
		default:
			r, size := utf8.DecodeRune(d.b[i:])
			if r == utf8.RuneError && size == 1 {
				out.WriteRune(utf8.RuneError)
			} else {
				out.Write(d.b[i : i+size])
			}
			i += size
		}
	}
	return "", false
}

// hex4 reads four hex digits, or returns -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
