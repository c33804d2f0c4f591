package guard

import (
	"reflect"
	"testing"
)

// TestStateEqualCoversEveryField: equal decides whether a state is saved
// again, so a change to any field of state (or of the structs inside it)
// must make it unequal; a field added to state and left out of equal
// would silently stop being saved. Each field is changed in turn.
func TestStateEqualCoversEveryField(t *testing.T) {
	base := state{AckCallID: "c1", AckSeq: 3, Pending: stallCounts{StepChars: 1, TurnChars: 2, Steps: 3}, StepDownLeft: 1,
		Notices: []notice{{Kind: 1, Message: 2, Hash: 3, Text: "n"}}}
	var leaves func(v reflect.Value, path string, visit func(reflect.Value, string))
	leaves = func(v reflect.Value, path string, visit func(reflect.Value, string)) {
		if v.Kind() == reflect.Struct {
			for i := range v.NumField() {
				leaves(v.Field(i), path+"."+v.Type().Field(i).Name, visit)
			}
			return
		}
		visit(v, path)
	}
	n := 0
	leaves(reflect.ValueOf(base), "state", func(_ reflect.Value, path string) {
		n++
		changed := base
		changed.Notices = append([]notice(nil), base.Notices...)
		i := 0
		leaves(reflect.ValueOf(&changed).Elem(), "state", func(v reflect.Value, p string) {
			if p != path {
				return
			}
			i++
			switch v.Kind() {
			case reflect.String:
				v.SetString(v.String() + "x")
			case reflect.Int, reflect.Int64, reflect.Int32:
				v.SetInt(v.Int() + 1)
			case reflect.Uint8, reflect.Uint64, reflect.Uint32, reflect.Uint:
				v.SetUint(v.Uint() + 1)
			case reflect.Bool:
				v.SetBool(!v.Bool())
			case reflect.Slice:
				v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
			default:
				t.Fatalf("%s: a %s field; teach this test to change it", p, v.Kind())
			}
		})
		if base.equal(changed) {
			t.Errorf("%s changed, yet equal says the states are the same", path)
		}
	})
	if n < 7 {
		t.Fatalf("only %d fields visited", n)
	}
}
