package device

import (
	"slices"
	"testing"

	"github.com/medama-io/go-useragent/agents"
)

// Every name the library can return maps into the exported vocabulary, and
// every value of the vocabulary is reachable.
func TestVocabularyCoversLibrary(t *testing.T) {
	oses := []agents.OS{agents.OSAndroid, agents.OSChromeOS, agents.OSIOS, agents.OSLinux,
		agents.OSFreeBSD, agents.OSOpenBSD, agents.OSMacOS, agents.OSWindows}
	browsers := []agents.Browser{agents.BrowserAndroid, agents.BrowserChrome, agents.BrowserEdge,
		agents.BrowserFirefox, agents.BrowserIE, agents.BrowserOpera, agents.BrowserOperaMini,
		agents.BrowserSafari, agents.BrowserVivaldi, agents.BrowserSilk, agents.BrowserSamsung,
		agents.BrowserFalkon, agents.BrowserNintendo, agents.BrowserYandex, agents.BrowserHuawei}
	var gotOS, gotBrowsers []string
	for _, o := range oses {
		gotOS = append(gotOS, osName(o))
	}
	for _, b := range browsers {
		gotBrowsers = append(gotBrowsers, browserName(b))
	}
	for _, c := range []struct {
		name      string
		got, want []string
	}{{"OSes", gotOS, OSes}, {"Browsers", gotBrowsers, Browsers}} {
		slices.Sort(c.got)
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(c.got, want) {
			t.Errorf("%s: the library maps to %q, the vocabulary is %q", c.name, c.got, want)
		}
	}
	if got := browserName("Some New Browser"); got != "somenewbrowser" {
		t.Errorf("an unknown browser maps to %q", got)
	}
}
