package events

import (
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"
)

// checkText reports the first place where b is not Unicode text: a byte
// sequence that is not UTF-8, or a \u escape of a surrogate that is not half
// of a pair (JSON allows "\ud800" syntactically, but it names no character).
// Such input cannot be put in the canonical form the chain hash covers
// (RFC 8785 requires Unicode), and two readers would decode it differently,
// so proposals holding it are refused when they are parsed. b is JSON that
// json.Valid accepted, so every backslash is inside a string.
func checkText(b []byte) error {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return fmt.Errorf("not UTF-8: byte 0x%02x at offset %d", b[i], i)
		}
		i += n
	}
	for i := 0; i+1 < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if b[i+1] != 'u' {
			i++ // \" \\ \n …: skip the escaped character
			continue
		}
		r, ok := hex4(b, i+2)
		if !ok {
			continue
		}
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				if lo, ok := hex4(b, i+8); ok && lo >= 0xDC00 && lo < 0xE000 {
					i += 11
					continue
				}
			}
			return fmt.Errorf("lone surrogate \\u%04x at offset %d: a high surrogate must be followed by a low one", r, i)
		case r >= 0xDC00 && r < 0xE000:
			return fmt.Errorf("lone surrogate \\u%04x at offset %d: a low surrogate must follow a high one", r, i)
		}
		i += 5
	}
	return nil
}

// hex4 reads the four hex digits at b[at:at+4].
func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// memberTwice returns a member name that the top-level object of b (valid
// JSON) holds twice, comparing names as decoded ("d\u0061ta" is "data").
func memberTwice(b []byte) (string, bool) {
	var seen [24]string // an event has a dozen attributes
	names := seen[:0]
	depth, key := 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			j, escaped := i+1, false
			for ; j < len(b) && b[j] != '"'; j++ {
				if b[j] == '\\' {
					escaped = true
					j++
				}
			}
			if depth == 1 && key {
				name := string(b[i+1 : j])
				if escaped {
					if err := json.Unmarshal(b[i:j+1], &name); err != nil {
						return "", false // not valid JSON: the caller's parse says why
					}
				}
				if slices.Contains(names, name) {
					return name, true
				}
				names = append(names, name)
				key = false
			}
			i = j
		case '{', '[':
			depth++
			key = depth == 1 && c == '{'
		case '}', ']':
			depth--
		case ',':
			key = depth == 1
		}
	}
	return "", false
}
