package redisq

import (
	"fmt"
	"testing"
)

// The Puts of one script call go in the order of the wheel, (due time, ID byte by byte), so that
// the script adds each after the one before it; due times compare as numbers.
func TestPutsOfACallGoInTheWheelsOrder(t *testing.T) {
	var reqs []*request
	for _, it := range []putItem{{req: "2000", id: "b"}, {req: "10000", id: "a"}, {req: "2000", id: "a\xff"},
		{req: "1000", id: "z"}, {req: "2000", id: "a"}} {
		reqs = append(reqs, &request{kind: opPut, items: []putItem{it}})
	}
	sortPuts(reqs)
	var got []string
	for _, r := range reqs {
		got = append(got, r.items[0].req+" "+r.items[0].id)
	}
	if want := []string{"1000 z", "2000 a", "2000 a\xff", "2000 b", "10000 a"}; fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Fatalf("sortPuts ordered %q; want %q", got, want)
	}
}
