package events

import (
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/gowebpki/jcs"
)

// canonicalEvent writes the RFC 8785 form of a structured-mode CloudEvent
// straight from its attributes, canonicalising only the data: the same bytes
// as jcs.Transform(json.Marshal(e)) at a fifth of the cost, which is most of
// what sealing an event costs. It reports false for what it does not handle
// (an extension of another type than string, integer or boolean, a string
// that is not valid UTF-8, data that is not JSON) and the caller falls back
// to the general path; TestCanonicalMatchesJCS holds the two together.
func canonicalEvent(e *event.Event) ([]byte, bool) {
	ctx, ok := e.Context.(*event.EventContextV1)
	if !ok || e.DataBase64 {
		return nil, false
	}
	type member struct {
		name  string
		str   string
		raw   []byte // written as is (numbers, booleans, canonical data)
		isRaw bool
	}
	members := make([]member, 0, 10+len(ctx.Extensions))
	add := func(name, v string) { members = append(members, member{name: name, str: v}) }
	add("specversion", event.CloudEventsVersionV1)
	add("id", ctx.ID)
	add("source", ctx.Source.String())
	add("type", ctx.Type)
	if ctx.Subject != nil {
		add("subject", *ctx.Subject)
	}
	if ctx.DataContentType != nil {
		if *ctx.DataContentType != event.ApplicationJSON {
			return nil, false
		}
		add("datacontenttype", *ctx.DataContentType)
	}
	if ctx.DataSchema != nil {
		add("dataschema", ctx.DataSchema.String())
	}
	if ctx.Time != nil {
		add("time", ctx.Time.String())
	}
	if e.DataEncoded != nil {
		data, ok := canonicalData(e.DataEncoded)
		if !ok {
			var err error
			if data, err = jcs.Transform(e.DataEncoded); err != nil {
				return nil, false
			}
		}
		members = append(members, member{name: "data", raw: data, isRaw: true})
	}
	for name, v := range ctx.Extensions {
		switch v := v.(type) {
		case string:
			add(name, v)
		case int32:
			members = append(members, member{name: name, raw: strconv.AppendInt(nil, int64(v), 10), isRaw: true})
		case bool:
			members = append(members, member{name: name, raw: strconv.AppendBool(nil, v), isRaw: true})
		default:
			return nil, false
		}
	}
	// Attribute names are lowercase ASCII, so byte order is RFC 8785's
	// UTF-16 code unit order.
	slices.SortFunc(members, func(a, b member) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	size := 2
	for _, m := range members {
		size += len(m.name) + len(m.str) + len(m.raw) + 8
	}
	out := make([]byte, 0, size+size/8)
	out = append(out, '{')
	for i, m := range members {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, '"')
		out = append(out, m.name...)
		out = append(out, '"', ':')
		if m.isRaw {
			out = append(out, m.raw...)
			continue
		}
		if !utf8.ValidString(m.str) {
			return nil, false
		}
		out = appendCanonicalString(out, m.str)
	}
	return append(out, '}'), true
}

// appendCanonicalString writes s as an RFC 8785 string: only the quote, the
// backslash and control characters are escaped, with the short forms where
// JSON has them and lowercase \u00xx otherwise.
func appendCanonicalString(out []byte, s string) []byte {
	const hex = "0123456789abcdef"
	out = append(out, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		out = append(out, s[start:i]...)
		switch c {
		case '"', '\\':
			out = append(out, '\\', c)
		case '\b':
			out = append(out, '\\', 'b')
		case '\f':
			out = append(out, '\\', 'f')
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	out = append(out, s[start:]...)
	return append(out, '"')
}
