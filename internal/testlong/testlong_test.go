package testlong

import "testing"

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		value string
		want  bool
	}{
		{"", false},
		{"0", false},
		{"false", false},
		{"1", true},
		{"true", true},
		{"TRUE", true},
	} {
		t.Setenv(Env, c.value)
		if got := Enabled(); got != c.want {
			t.Errorf("%s=%q: Enabled() = %v, want %v", Env, c.value, got, c.want)
		}
		if got, want := Pick("normal", "long"), map[bool]string{false: "normal", true: "long"}[c.want]; got != want {
			t.Errorf("%s=%q: Pick = %q, want %q", Env, c.value, got, want)
		}
	}
}

// TestEnabledRefusesAMistypedValue checks that a value that is neither on nor off panics, naming the
// variable, rather than quietly running the short suite.
func TestEnabledRefusesAMistypedValue(t *testing.T) {
	t.Setenv(Env, "yes please")
	defer func() {
		r := recover()
		msg, _ := r.(string)
		if want := `testlong: TOCK_LONG="yes please": want 1 (long mode) or 0`; msg != want {
			t.Errorf("panic = %v, want %q", r, want)
		}
	}()
	Enabled()
	t.Error("Enabled returned for a mistyped value")
}

func TestSkip(t *testing.T) {
	t.Setenv(Env, "0")
	ran := false
	t.Run("off", func(t *testing.T) {
		Skip(t)
		ran = true
	})
	if ran {
		t.Error("Skip did not skip with long mode off")
	}
	t.Setenv(Env, "1")
	t.Run("on", func(t *testing.T) {
		Skip(t)
		ran = true
	})
	if !ran {
		t.Error("Skip skipped with long mode on")
	}
}
