// Package jsonscan finds the ends of JSON values by matching quotes and
// brackets, without decoding or checking them: for readers of JSON the
// ledger already checked, which want one member of a large object.
package jsonscan

import (
	"bytes"
	"encoding/json"
)

// DecodeMembers decodes into v only the named top-level members of the JSON
// object data, skipping the others without decoding them: a tool call's
// result can be megabytes that json.Unmarshal would scan twice to read two
// numbers beside it. Names are matched exactly (json.Unmarshal would also
// match them without regard to case); anything unexpected leaves v as it is.
func DecodeMembers(data []byte, v any, names ...string) {
	obj := []byte{'{'}
	i := SkipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return
	}
	for i++; ; i++ {
		i = SkipSpace(data, i)
		if i >= len(data) || data[i] != '"' {
			break // '}' or something unexpected
		}
		nameEnd := StringEnd(data, i)
		if nameEnd < 0 {
			return
		}
		name := data[i:nameEnd]
		i = SkipSpace(data, nameEnd)
		if i >= len(data) || data[i] != ':' {
			return
		}
		start := SkipSpace(data, i+1)
		end := ValueEnd(data, start)
		if end < 0 {
			return
		}
		for _, n := range names {
			if len(name) == len(n)+2 && string(name[1:len(name)-1]) == n {
				if len(obj) > 1 {
					obj = append(obj, ',')
				}
				obj = append(append(append(obj, name...), ':'), data[start:end]...)
			}
		}
		if i = SkipSpace(data, end); i >= len(data) || data[i] != ',' {
			break
		}
	}
	_ = json.Unmarshal(append(obj, '}'), v)
}

// SkipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// StringEnd returns the index just past the string whose quote is at b[i],
// or -1.
func StringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		q := j + k
		escapes := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			escapes++
		}
		if escapes%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
	return -1
}

// ValueEnd returns the index just past the JSON value at b[i], matching
// quotes and brackets without checking the grammar, or -1.
func ValueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return StringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end := StringEnd(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\t' && b[j] != '\r' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}
