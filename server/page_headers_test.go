package server

import (
	"testing"

	"github.com/tockwheel/tock/api"
)

// TestPageShowsHeaders opens a message with headers on the status page and finds each header
// in its view, as text: a value made of HTML and script is shown as it is and runs nothing.
func TestPageShowsHeaders(t *testing.T) {
	p := newPageQueue(t)
	r := p.call(t, "POST", api.PutPath("orders"), `{"id":"h1","payload":1,"delay":"1h","headers":{`+
		`"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",`+
		`"x-html":"<img src=x onerror=\"window.pwned=1\"><script>window.pwned=2</script>"}}`)
	if r.status != 201 {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	b := newBrowser(t, 1400, 1000, "")
	b.open(p.ts.URL + "/")
	b.waitFor("the topics table", jsCell("orders", "scheduled")+` === "1"`)
	b.click(`#topics-table tr[data-topic="orders"] button.link`)
	b.waitFor("the row", jsRowIDs+` === "h1"`)
	b.click(`#messages tr[data-id="h1"] td.id`)
	b.waitFor("the headers", `document.getElementById("detail-fields").textContent.includes("header traceparent00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")`)
	if got := b.text(`[...document.querySelectorAll("#detail-fields dt")].filter(e => e.textContent === "header x-html").map(e => e.nextElementSibling.textContent).join()`); got != `<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>` {
		t.Errorf("the x-html header shows as %q", got)
	}
	if got := b.text(`String(document.querySelectorAll("#detail img, #detail script").length) + " " + String(window.pwned)`); got != "0 undefined" {
		t.Errorf("the header's HTML became elements or ran: %s", got)
	}
}
