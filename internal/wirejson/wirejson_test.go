package wirejson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

// validCases are values the Reader takes, with whether they are compact.
var validCases = []struct {
	in      string
	compact bool
}{
	{`0`, true}, {`-0`, true}, {`12`, true}, {`-1.5e+10`, true}, {`1E-2`, true}, {`0.25`, true},
	{`true`, true}, {`false`, true}, {`null`, true},
	{`""`, true}, {`"a \"quoted\" \\ \/ \b\f\n\r\t \u00e9\uD83D\uDE00 string"`, true},
	{"\"bytes \xff\xfe that are not UTF-8\"", true}, {`"é"`, true},
	{`{}`, true}, {`[]`, true}, {`{"a":[1,{"b":null}],"c":"d"}`, true},
	{` { "a" : [ 1 , 2 ] } `, false}, {"[\n1,\t2\r]", false}, {`{"a b":" c "}`, true},
	{strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), true},
}

// invalidCases are not JSON, or are more than the Reader takes.
var invalidCases = []string{
	``, ` `, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `0x1`, `tru`, `nul`, `True`, `"abc`, `"\x"`,
	`"\u12"`, `"\u12g4"`, "\"a\x01b\"", `{`, `}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[1 2]`,
	`{a:1}`, `{"a":1 "b":2}`, `[]]`, `{} {}`, `1 2`, `"a" x`,
	strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
}

func TestValid(t *testing.T) {
	for _, c := range validCases {
		ok, compact := Valid([]byte(c.in))
		if !ok || compact != c.compact {
			t.Errorf("Valid(%q) = %v, compact %v; want true, compact %v", c.in, ok, compact, c.compact)
		}
	}
	for _, in := range invalidCases {
		if ok, _ := Valid([]byte(in)); ok {
			t.Errorf("Valid(%q) = true; want false", in)
		}
	}
}

func TestPrefix(t *testing.T) {
	for _, in := range []string{
		``, ` `, `{`, `{"`, `{"a`, `{"a"`, `{"a":`, `{"a":1`, `{"a":1,`, `{"a":[`, `[1`, `[1,`, `-`, `1.`,
		`1e`, `1e+`, `12`, `t`, `nul`, `"\`, `"\u00`, `{"payload":"x"} `, `{}`, "[\n",
	} {
		if !Prefix([]byte(in)) {
			t.Errorf("Prefix(%q) = false; want true", in)
		}
	}
	for _, in := range []string{
		`{"payload":x`, `x`, `{1`, `{"a" 1`, `[1 2`, `[1,]`, `nulx`, `01`, `-a`, `1.e`, `"\x`, `"\u00g`,
		"\"a\x01", `{}{}`, `{} x`, `1 2`,
	} {
		if Prefix([]byte(in)) {
			t.Errorf("Prefix(%q) = true; want false", in)
		}
	}
}

func TestStringBoolAndInt(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		ok   bool
	}{
		{`"order-7"`, "order-7", true}, {` "é"`, "é", true}, {`""`, "", true},
		{`"a\"b"`, "", false}, {"\"\xff\"", "", false}, {"\"a\tb\"", "", false}, {`7`, "", false}, {`"abc`, "", false},
	} {
		r := NewReader([]byte(c.in))
		s, ok := r.String()
		if ok != c.ok || string(s) != c.want {
			t.Errorf("String(%q) = %q, %v; want %q, %v", c.in, s, ok, c.want, c.ok)
		}
	}
	for _, c := range []struct {
		in   string
		want bool
		ok   bool
	}{
		{`true`, true, true}, {` false`, false, true}, {`null`, false, false}, {`tru`, false, false},
		{`"true"`, false, false}, {`1`, false, false}, {`f`, false, false},
	} {
		r := NewReader([]byte(c.in))
		v, ok := r.Bool()
		if ok != c.ok || v != c.want {
			t.Errorf("Bool(%q) = %v, %v; want %v, %v", c.in, v, ok, c.want, c.ok)
		}
	}
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{
		{`0`, 0, true}, {`-0`, 0, true}, {`100`, 100, true}, {` -42 `, -42, true},
		{`01`, 0, false}, {`1.0`, 0, false}, {`1e3`, 0, false}, {`-`, 0, false}, {`"1"`, 0, false},
		{`1234567890123456789`, 0, false},
	} {
		r := NewReader([]byte(c.in))
		n, ok := r.Int()
		if ok != c.ok || n != c.want {
			t.Errorf("Int(%q) = %d, %v; want %d, %v", c.in, n, ok, c.want, c.ok)
		}
	}
}

// FuzzValid checks the Reader's one promise on arbitrary bytes: what it takes, encoding/json
// takes the same way. A value Valid takes is valid for encoding/json, compact exactly when
// json.Compact leaves it as it is; a string String takes decodes to the same string, and an
// integer Int takes to the same int, and a bool Bool takes to the same bool.
func FuzzValid(f *testing.F) {
	for _, c := range validCases {
		f.Add([]byte(c.in))
	}
	for _, in := range invalidCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ok, compact := Valid(data)
		if ok {
			if !json.Valid(data) {
				t.Fatalf("Valid(%q) = true; encoding/json says it is not JSON", data)
			}
			var c bytes.Buffer
			json.Compact(&c, bytes.TrimSpace(data))
			if same := bytes.Equal(c.Bytes(), bytes.TrimSpace(data)); same != compact {
				t.Fatalf("Valid(%q): compact %v; json.Compact gives %q", data, compact, c.Bytes())
			}
		}
		if Prefix(data) {
			// encoding/json's Decoder, which fails at the first byte no JSON can have, has not.
			dec := json.NewDecoder(bytes.NewReader(data))
			var v json.RawMessage
			err := dec.Decode(&v)
			var se *json.SyntaxError
			if errors.As(err, &se) {
				t.Fatalf("Prefix(%q) = true; encoding/json fails: %v", data, err)
			}
			if err == nil {
				if _, err := dec.Token(); err != io.EOF {
					t.Fatalf("Prefix(%q) = true; encoding/json finds more after the value: %v", data, err)
				}
			}
		}
		r := NewReader(data)
		if s, ok := r.String(); ok && r.End() {
			var want string
			if err := json.Unmarshal(data, &want); err != nil || want != string(s) {
				t.Fatalf("String(%q) = %q; encoding/json gives %q, %v", data, s, want, err)
			}
		}
		r = NewReader(data)
		if n, ok := r.Int(); ok && r.End() {
			var want int
			if err := json.Unmarshal(data, &want); err != nil || want != n {
				t.Fatalf("Int(%q) = %d; encoding/json gives %d, %v", data, n, want, err)
			}
		}
		r = NewReader(data)
		if v, ok := r.Bool(); ok && r.End() {
			var want bool
			if err := json.Unmarshal(data, &want); err != nil || want != v {
				t.Fatalf("Bool(%q) = %v; encoding/json gives %v, %v", data, v, want, err)
			}
		}
	})
}
