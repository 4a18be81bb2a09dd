package events

// ValidJSON is validJSON, for FuzzValidJSON.
var ValidJSON = validJSON

// UnmarshalAroundData is unmarshalAroundData, for the tests of its fast path.
var UnmarshalAroundData = unmarshalAroundData
