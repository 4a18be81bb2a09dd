package events

// testKey signs the events the package's internal tests seal.
var testKey = mustKey()

func mustKey() *SigningKey {
	k, err := GenerateSigningKey()
	if err != nil {
		panic(err)
	}
	return k
}
