package bridge

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecodeHeaders: DecodeHeaders agrees with json.Unmarshal into a map[string]string on
// every input: the same map (nil for "" and "{}") or an error whenever json.Unmarshal fails.
func FuzzDecodeHeaders(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `{"trace_id":"0af7651916cd43dd8448eb211c80319c"}`, `{"a":"1","b":"2"}`,
		` { "a" : "1" , "b":"" } `, `{"a":"1","a":"2"}`, `{"a":"x\"y"}`, `{"a":"\u003c\u00e9"}`,
		`{"é":"ü"}`, "{\"a\":\"\xff\"}", "{\"a\":\"\t\"}", `{"a":1}`, `{"a":null}`, `null`, `[]`,
		`{"a":"1",}`, `{"a":"1"`, `{"a"}`, `{"a":"1"} x`, `{"a":"1"}{}`, `{`, `"a"`, `{,}`,
		`{"a":"1" "b":"2"}`, "{\"a\":\"1\"}\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := DecodeHeaders(s)
		if s == "" || s == "{}" {
			if got != nil || err != nil {
				t.Fatalf("DecodeHeaders(%q) = %v, %v; want nil, nil", s, got, err)
			}
			return
		}
		var want map[string]string
		wantErr := json.Unmarshal([]byte(s), &want)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("DecodeHeaders(%q): error %v, json.Unmarshal: %v", s, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeHeaders(%q) = %#v, json.Unmarshal: %#v", s, got, want)
		}
	})
}
