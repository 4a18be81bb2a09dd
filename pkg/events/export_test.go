package events

// ValidJSON is validJSON, for FuzzValidJSON.
var ValidJSON = validJSON
