package redislock

import (
	"errors"
	"slices"
	"testing"
)

func TestParseAcquire(t *testing.T) {
	cases := []struct {
		reply    any
		acquired bool
		n        int64
		ok       bool
	}{
		{[]any{int64(1), int64(7), int64(0)}, true, 7, true},
		{[]any{int64(1), int64(1795462619817384), int64(2)}, true, 1795462619817384, true},
		{[]any{int64(0), int64(1500), int64(0)}, false, 1500, true},
		{[]any{int64(0), int64(-1), int64(0)}, false, -1, true},
		{nil, false, 0, false},
		{"OK", false, 0, false},
		{int64(1), false, 0, false},
		{[]any{}, false, 0, false},
		{[]any{int64(1)}, false, 0, false},
		{[]any{int64(1), int64(7)}, false, 0, false},
		{[]any{int64(1), int64(2), int64(3), int64(4)}, false, 0, false},
		{[]any{int64(2), int64(7), int64(0)}, false, 0, false},
		{[]any{"1", int64(7), int64(0)}, false, 0, false},
		{[]any{int64(1), "7", int64(0)}, false, 0, false},
		{[]any{int64(1), nil, int64(0)}, false, 0, false},
		{[]any{int64(1), int64(7), int64(-1)}, false, 0, false},
		{[]any{int64(1), int64(7), "0"}, false, 0, false},
	}
	for _, c := range cases {
		acquired, n, _, err := parseAcquire(c.reply)
		if c.ok != (err == nil) || (err != nil && !errors.Is(err, ErrProtocol)) {
			t.Errorf("parseAcquire(%#v): err = %v, want ok=%v", c.reply, err, c.ok)
			continue
		}
		if c.ok && (acquired != c.acquired || n != c.n) {
			t.Errorf("parseAcquire(%#v) = %v, %d; want %v, %d", c.reply, acquired, n, c.acquired, c.n)
		}
	}
}

func TestParseRenew(t *testing.T) {
	cases := []struct {
		reply any
		n     int
		want  []bool
	}{
		{[]any{int64(1), int64(0), int64(1)}, 3, []bool{true, false, true}},
		{[]any{}, 0, []bool{}},
		{[]any{int64(1)}, 2, nil},
		{[]any{int64(1), int64(1)}, 1, nil},
		{[]any{int64(2)}, 1, nil},
		{[]any{"1"}, 1, nil},
		{nil, 1, nil},
		{int64(1), 1, nil},
	}
	for _, c := range cases {
		got, err := parseRenew(c.reply, c.n)
		if c.want == nil {
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("parseRenew(%#v, %d): err = %v, want ErrProtocol", c.reply, c.n, err)
			}
			continue
		}
		if err != nil || len(got) != len(c.want) {
			t.Errorf("parseRenew(%#v, %d) = %v, %v; want %v", c.reply, c.n, got, err, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("parseRenew(%#v, %d) = %v; want %v", c.reply, c.n, got, c.want)
			}
		}
	}
}

func TestParseRenewNode(t *testing.T) {
	cases := []struct {
		reply    any
		n        int
		want     []int
		replicas int
	}{
		{[]any{int64(1), int64(0), int64(-1), int64(2)}, 3, []int{1, 0, -1}, 2},
		{[]any{int64(0)}, 0, []int{}, 0},
		{[]any{int64(1)}, 1, nil, 0},
		{[]any{int64(1), int64(1), int64(0)}, 1, nil, 0},
		{[]any{int64(2), int64(0)}, 1, nil, 0},
		{[]any{int64(-2), int64(0)}, 1, nil, 0},
		{[]any{int64(1), int64(-1)}, 1, nil, 0},
		{[]any{"1", int64(0)}, 1, nil, 0},
		{nil, 1, nil, 0},
	}
	for _, c := range cases {
		got, replicas, err := parseRenewNode(c.reply, c.n)
		if c.want == nil {
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("parseRenewNode(%#v, %d): err = %v, want ErrProtocol", c.reply, c.n, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) || replicas != c.replicas {
			t.Errorf("parseRenewNode(%#v, %d) = %v, %d, %v; want %v, %d", c.reply, c.n, got, replicas, err, c.want, c.replicas)
		}
	}
}
