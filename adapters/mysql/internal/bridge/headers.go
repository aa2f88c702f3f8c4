package bridge

import (
	"encoding/json"
	"unicode/utf8"
)

// DecodeHeaders decodes the headers column: a JSON object of strings, as Write stores it
// (json.Marshal of a map[string]string). It returns nil for "" and "{}". A flat object whose
// strings hold no escapes is read directly (the relay reads one per record: json.Unmarshal
// into a map was a sixth of the relay's CPU in BenchmarkDrain); anything else goes through
// json.Unmarshal, so the result and the errors are json.Unmarshal's in every case.
func DecodeHeaders(s string) (map[string]string, error) {
	if s == "" || s == "{}" {
		return nil, nil
	}
	if m, ok := decodeFlatHeaders(s); ok {
		return m, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, err
	}
	return m, nil
}

// decodeFlatHeaders reads {"k":"v",...} with optional JSON whitespace, where no string holds
// a backslash or a control character and the text is valid UTF-8. ok is false for anything
// else (the caller then uses json.Unmarshal).
func decodeFlatHeaders(s string) (m map[string]string, ok bool) {
	if !utf8.ValidString(s) {
		return nil, false
	}
	i := 0
	ws := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
	}
	str := func() (string, bool) {
		if i >= len(s) || s[i] != '"' {
			return "", false
		}
		start := i + 1
		for j := start; j < len(s); j++ {
			switch c := s[j]; {
			case c == '"':
				i = j + 1
				return s[start:j], true
			case c == '\\' || c < 0x20:
				return "", false
			}
		}
		return "", false
	}
	ws()
	if i >= len(s) || s[i] != '{' {
		return nil, false
	}
	i++
	m = map[string]string{}
	ws()
	if i < len(s) && s[i] == '}' {
		i++
	} else {
		for {
			ws()
			k, ok := str()
			if !ok {
				return nil, false
			}
			ws()
			if i >= len(s) || s[i] != ':' {
				return nil, false
			}
			i++
			ws()
			v, ok := str()
			if !ok {
				return nil, false
			}
			m[k] = v
			ws()
			if i >= len(s) {
				return nil, false
			}
			if s[i] == '}' {
				i++
				break
			}
			if s[i] != ',' {
				return nil, false
			}
			i++
		}
	}
	ws()
	if i != len(s) {
		return nil, false
	}
	return m, true
}
