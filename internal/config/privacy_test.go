package config_test

import (
	"fmt"
	"strings"
	"testing"
)

// ads.tcf_vendor_id is 0 (none) or an IAB TCF vendor id, from the file or
// the environment; without one, a configuration that serves ads carries
// a notice saying that where GDPR applies no visitor is kept.
func TestTCFVendorID(t *testing.T) {
	for v, ok := range map[string]bool{"0": true, "1": true, "755": true, "65535": true, "-1": false, "65536": false} {
		cfg := load(t, "", "TSUBAME_ADS_TCF_VENDOR_ID="+v)
		errs := fmt.Sprint(cfg.Validate())
		if got := !strings.Contains(errs, "ads.tcf_vendor_id"); got != ok {
			t.Errorf("tcf_vendor_id %s: accepted %v, want %v (%s)", v, got, ok, errs)
		}
	}
	if got := load(t, "ads: {tcf_vendor_id: 755}\n").Ads.TCFVendorID; got != 755 {
		t.Errorf("tcf_vendor_id from the file: %d", got)
	}

	notices := load(t, "").Notices()
	if len(notices) != 1 || !strings.Contains(notices[0], "ads.tcf_vendor_id is not set") || !strings.Contains(notices[0], "GDPR") {
		t.Errorf("the defaults' notices: %q", notices)
	}
	if n := load(t, "", "TSUBAME_ADS_TCF_VENDOR_ID=755").Notices(); len(n) != 0 {
		t.Errorf("with a vendor id: %q", n)
	}
	if n := load(t, "", "TSUBAME_ADS_ENABLED=false").Notices(); len(n) != 0 {
		t.Errorf("without ads: %q", n)
	}
}
