package main

import (
	"strings"
	"testing"
)

// check-config says, once, that without ads.tcf_vendor_id no visitor is
// kept where GDPR applies; with one, or without ads, it says nothing of it.
func TestCheckConfigTCFVendorID(t *testing.T) {
	const note = "tsubame: note: ads.tcf_vendor_id is not set: where GDPR applies"
	env := []string{"TSUBAME_DATA_DIR=" + t.TempDir()}
	code, _, stderr := runCmd(t, env, "", "check-config")
	if code != 0 || strings.Count(stderr, note) != 1 || !strings.Contains(stderr, "configuration ok") {
		t.Errorf("without a vendor id: %d %s", code, stderr)
	}
	for _, set := range []string{"TSUBAME_ADS_TCF_VENDOR_ID=755", "TSUBAME_ADS_ENABLED=false"} {
		code, _, stderr := runCmd(t, append(env, set), "", "check-config")
		if code != 0 || strings.Contains(stderr, "tcf_vendor_id") {
			t.Errorf("%s: %d %s", set, code, stderr)
		}
	}
	if code, _, stderr := runCmd(t, append(env, "TSUBAME_ADS_TCF_VENDOR_ID=70000"), "", "check-config"); code != 2 ||
		!strings.Contains(stderr, "ads.tcf_vendor_id: must be 0 (none) or an IAB TCF vendor id") {
		t.Errorf("vendor id 70000: %d %s", code, stderr)
	}
}
