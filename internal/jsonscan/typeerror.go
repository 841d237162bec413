package jsonscan

import (
	"encoding/json"
	"errors"
	"strings"
)

// TypeError reads encoding/json's error for a value of the wrong JSON
// type, so that a decoder can word it as its record's problem rather
// than in encoding/json's words ("cannot unmarshal array into Go value
// of type ..."): field is the JSON name of the field that had it ("" for
// the document itself), got the JSON kind it had, with its article ("an
// array", "a string", or "number 1.5" as encoding/json gives a number
// that does not fit). ok is false for any other error.
func TypeError(err error) (field, got string, ok bool) {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return "", "", false
	}
	got = te.Value
	if !strings.Contains(got, " ") {
		got = article(got) + " " + got
	}
	return te.Field, got, true
}

// article is "an" before a word that starts with a vowel, else "a".
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}
