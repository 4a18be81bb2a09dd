package events

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
)

// binaryPrefix starts every attribute header of a binary-mode CloudEvent in the
// NATS protocol binding.
const binaryPrefix = "ce-"

// ErrMalformed wraps every reason a message is not a conformant CloudEvent.
var ErrMalformed = errors.New("malformed CloudEvent")

// FromNATS reads a CloudEvent from a NATS message in either content mode:
// structured (a JSON CloudEvent body, Content-Type application/cloudevents+json
// or no ce- headers) or binary (attributes in ce- headers, data in the body).
// The result is validated against the CloudEvents 1.0 rules: another
// specversion, or text that is not Unicode (bytes that are not UTF-8, a lone
// surrogate escape such as "\ud800"), is malformed.
func FromNATS(h nats.Header, body []byte) (event.Event, error) {
	var (
		e   event.Event
		err error
	)
	if isBinary(h) {
		e, err = fromBinary(h, body)
	} else {
		e, err = Unmarshal(body)
		if err == nil {
			err = checkText(body)
		}
		if err == nil {
			if name, dup := memberTwice(body); dup {
				// The SDK keeps the last: what the proposer's other
				// readers see may be the first.
				err = fmt.Errorf("member %q appears twice in the event: name each attribute, and data, once", name)
			}
		}
	}
	if err == nil && e.DataBase64 {
		// Decoded from data_base64: JSON that is stored as data.
		if terr := checkText(e.DataEncoded); terr != nil {
			err = fmt.Errorf("data_base64: %w", terr)
		}
	}
	if err == nil {
		err = checkMediaType(e)
	}
	if err == nil && e.SpecVersion() != event.CloudEventsVersionV1 {
		err = fmt.Errorf("specversion %q is not supported: Rath accepts CloudEvents %s only", e.SpecVersion(), event.CloudEventsVersionV1)
	}
	if err != nil {
		return event.Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := e.Validate(); err != nil {
		return event.Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return e, nil
}

func isBinary(h nats.Header) bool {
	if strings.HasPrefix(h.Get("Content-Type"), ContentTypeStructured) {
		return false
	}
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), binaryPrefix) {
			return true
		}
	}
	return false
}

func fromBinary(h nats.Header, body []byte) (event.Event, error) {
	attr := map[string]string{}
	for k, vs := range h {
		lk := strings.ToLower(k)
		if !strings.HasPrefix(lk, binaryPrefix) || len(vs) == 0 {
			continue
		}
		v, err := url.PathUnescape(vs[0])
		if err != nil {
			return event.Event{}, fmt.Errorf("header %s: %v", k, err)
		}
		if !utf8.ValidString(v) {
			return event.Event{}, fmt.Errorf("header %s: not UTF-8", k)
		}
		attr[lk[len(binaryPrefix):]] = v
	}
	if sv := attr["specversion"]; sv != event.CloudEventsVersionV1 {
		return event.Event{}, fmt.Errorf("ce-specversion must be %q, got %q", event.CloudEventsVersionV1, sv)
	}
	e := event.New()
	for name, v := range attr {
		switch name {
		case "specversion":
		case "id":
			e.SetID(v)
		case "source":
			e.SetSource(v)
		case "type":
			e.SetType(v)
		case "subject":
			e.SetSubject(v)
		case "dataschema":
			e.SetDataSchema(v)
		case "datacontenttype":
			// The NATS binding carries it as Content-Type; accept the
			// attribute header too.
			e.SetDataContentType(v)
		case "time":
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return event.Event{}, fmt.Errorf("ce-time: %v", err)
			}
			e.SetTime(t)
		default:
			if err := e.Context.SetExtension(name, v); err != nil {
				return event.Event{}, fmt.Errorf("ce-%s: %v", name, err)
			}
		}
	}
	if ct := h.Get("Content-Type"); ct != "" {
		e.SetDataContentType(ct)
	}
	if ct := e.DataContentType(); ct != "" {
		// The body is bytes whatever the media type says, so writing the
		// type canonically changes nothing about what the data is.
		e.SetDataContentType(canonicalMediaType(ct))
	} else {
		e.SetDataContentType(event.ApplicationJSON)
	}
	if err := checkText(body); err != nil {
		return event.Event{}, fmt.Errorf("data: %w", err)
	}
	e.DataEncoded = body
	return e, nil
}

// canonicalMediaType writes a content type's media type in lower case without
// surrounding space, keeping its parameters. Media types are case-insensitive
// (RFC 2045), but the CloudEvents SDK lower-cases one when it writes data and
// not when it reads it back: "Application/JSON" data would be written as JSON
// and then read as a string.
func canonicalMediaType(ct string) string {
	mt, params, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	if params == "" && !strings.Contains(ct, ";") {
		return mt
	}
	return mt + ";" + params
}

// checkMediaType refuses a structured event whose datacontenttype is not
// written canonically: the SDK has already read its data by the type's exact
// spelling, so rewriting the type would change what the data means.
func checkMediaType(e event.Event) error {
	ct := e.DataContentType()
	if ct == "" || canonicalMediaType(ct) == ct {
		return nil
	}
	return fmt.Errorf("datacontenttype %q: write the media type in lower case, without spaces around it", ct)
}
