package server

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/delayq"
)

// TestNackAndExtendRequests checks what POST /v1/nack and /v1/extend refuse before the engine is
// asked, and what they do: an extend holds a lease past its visibility, and a nack's reason and
// dead_letter reach the message's last failure.
func TestNackAndExtendRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := delayq.Open(t.TempDir(), delayq.WithNoSync())
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		w := tock.New()
		defer w.Stop()
		s := New(q, WithWheel(w))
		if r := serve(t, s, "POST", "/v1/topics/t/messages", `{"id":"m"}`); r.status != 201 {
			t.Fatalf("put: %d %s", r.status, r.body)
		}
		rc := receipts(t, serve(t, s, "POST", "/v1/topics/t/receive", `{"max":1,"visibility":"1s"}`))[0]
		body := func(v any) string { b, _ := json.Marshal(v); return string(b) }
		for _, c := range []struct {
			name, path, body string
			code             string
		}{
			{"extend without visibility", api.PathExtend, body(api.ExtendRequest{Receipt: rc}), api.CodeBadRequest},
			{"extend of zero", api.PathExtend, body(api.ExtendRequest{Receipt: rc, Visibility: "0s"}), api.CodeBadRequest},
			{"extend over MaxVisibility", api.PathExtend, body(api.ExtendRequest{Receipt: rc, Visibility: "13h"}), api.CodeBadRequest},
			{"extend of a forged receipt", api.PathExtend, body(api.ExtendRequest{Receipt: "forged", Visibility: "1m"}), api.CodeUnknownReceipt},
			{"extend without a receipt", api.PathExtend, `{"visibility":"1m"}`, api.CodeBadRequest},
			{"nack with a long reason", api.PathNack, body(api.NackRequest{Receipt: rc, Reason: strings.Repeat("r", api.MaxReason+1)}), api.CodeBadRequest},
			{"nack with a reason not UTF-8", api.PathNack, `{"receipt":"` + rc + `","reason":"\xff"}`, api.CodeBadRequest},
			{"nack to the dead letters with a delay", api.PathNack, `{"receipt":"` + rc + `","dead_letter":true,"delay":"1m"}`, api.CodeBadRequest},
		} {
			r := serve(t, s, "POST", c.path, c.body)
			var e api.ErrorBody
			r.json(t, &e)
			if r.status != 400 || e.Code != c.code {
				t.Errorf("%s: %d %q; want 400 %q", c.name, r.status, e.Code, c.code)
			}
		}
		// Held past its visibility of 1s by two extends, the lease is still current.
		for range 2 {
			time.Sleep(800 * time.Millisecond)
			if r := serve(t, s, "POST", api.PathExtend, body(api.ExtendRequest{Receipt: rc, Visibility: "1s"})); r.status != 204 {
				t.Fatalf("extend: %d %s", r.status, r.body)
			}
		}
		r := serve(t, s, "POST", api.PathNack, `{"receipt":"`+rc+`","reason":"out of stock","dead_letter":true}`)
		if r.status != 204 {
			t.Fatalf("nack to the dead letters: %d %s", r.status, r.body)
		}
		var m api.MessageInfo
		serve(t, s, "GET", "/v1/messages/m", "").json(t, &m)
		if m.State != api.StateDead || m.LastFailure != "dead-lettered" || m.Reason != "out of stock" || m.Attempts != 1 {
			t.Fatalf("after a nack to the dead letters on the first attempt: %+v", m)
		}
		if r := serve(t, s, "POST", api.PathExtend, body(api.ExtendRequest{Receipt: rc, Visibility: "1s"})); r.status != 400 {
			t.Fatalf("extend of a nacked lease: %d %s; want 400 unknown_receipt", r.status, r.body)
		}
	})
}

// TestExtendSeveralReceipts checks POST /v1/extend with "receipts": it answers for each receipt,
// as an ack does, and the leases it extends are held past their visibility.
func TestExtendSeveralReceipts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := delayq.Open(t.TempDir(), delayq.WithNoSync())
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		w := tock.New()
		defer w.Stop()
		s := New(q, WithWheel(w))
		for _, id := range []string{"a", "b", "c"} {
			if r := serve(t, s, "POST", "/v1/topics/t/messages", `{"id":"`+id+`"}`); r.status != 201 {
				t.Fatalf("put: %d %s", r.status, r.body)
			}
		}
		rcs := receipts(t, serve(t, s, "POST", "/v1/topics/t/receive", `{"max":3,"visibility":"1s"}`))
		if len(rcs) != 3 {
			t.Fatalf("received %d; want 3", len(rcs))
		}
		if r := serve(t, s, "POST", api.PathAck, `{"receipts":["`+rcs[1]+`"]}`); r.status != 204 {
			t.Fatalf("ack: %d %s", r.status, r.body)
		}
		body := func(v any) string { b, _ := json.Marshal(v); return string(b) }
		for _, c := range []struct{ name, body string }{
			{"receipt and receipts", body(api.ExtendRequest{Receipt: rcs[0], Receipts: rcs, Visibility: "1s"})},
			{"no receipts", `{"receipts":[],"visibility":"1s"}`},
			{"receipts without visibility", body(api.ExtendRequest{Receipts: rcs})},
			{"receipts too short for their answer", body(api.ExtendRequest{Receipts: make([]string, 200), Visibility: "1s"})},
		} {
			r := serve(t, s, "POST", api.PathExtend, c.body)
			var e api.ErrorBody
			r.json(t, &e)
			if r.status != 400 || e.Code != api.CodeBadRequest {
				t.Errorf("%s: %d %q; want 400 %q", c.name, r.status, e.Code, api.CodeBadRequest)
			}
		}
		r := serve(t, s, "POST", api.PathExtend, body(api.ExtendRequest{Receipts: []string{rcs[0], "", rcs[1], rcs[2], "forged"}, Visibility: "1s"}))
		var e api.ExtendErrorBody
		r.json(t, &e)
		if r.status != 400 || e.Code != api.CodeUnknownReceipt || e.Extended != 2 || !slices.Equal(e.Failed, []int{1, 2, 4}) {
			t.Fatalf("extend of 2 current leases, an empty receipt, an acked one and a forged one: %d %s; want 400 extended 2, failed [1 2 4]", r.status, r.body)
		}
		// Held past their visibility of 1s by an extend, both leases are still current to be
		// extended again (an extend of a lease that ran out is refused).
		for range 2 {
			time.Sleep(800 * time.Millisecond)
			if r := serve(t, s, "POST", api.PathExtend, body(api.ExtendRequest{Receipts: []string{rcs[2], rcs[0]}, Visibility: "1s"})); r.status != 204 {
				t.Fatalf("extend: %d %s", r.status, r.body)
			}
		}
		if r := serve(t, s, "POST", api.PathAck, body(api.AckRequest{Receipts: []string{rcs[0], rcs[2]}})); r.status != 204 {
			t.Fatalf("ack of the extended leases: %d %s", r.status, r.body)
		}
	})
}
