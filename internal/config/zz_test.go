package config
import ("testing";"time")
func TestZZ(t *testing.T){
 s := "x-0: &a0 {connector: noop}\n"
 for i:=1;i<9;i++ { s += "x-"+string(rune('0'+i))+": &a"+string(rune('0'+i))+" {<<: [" ; for j:=0;j<10;j++ { if j>0 {s+=", "}; s+="*a"+string(rune('0'+i-1)) }; s+="]}\n" }
 s += "actions:\n  x: *a8\n"
 st := time.Now(); _, err := Parse("c.yaml", []byte(s)); t.Log(time.Since(st), err)
 s2 := "a: &a [x,x,x,x,x,x,x,x,x,x]\n"
 for i:=1;i<9;i++ { s2 += "x-"+string(rune('0'+i))+": &a"+string(rune('0'+i))+" [*a"+string(rune('0'+i-1))+",*a"+string(rune('0'+i-1))+",*a"+string(rune('0'+i-1))+"]\n" }
 s2 += "actions:\n  x: {connector: noop, unique_by: *a8}\n"
 st = time.Now(); _, err = Parse("c.yaml", []byte(s2)); t.Log(time.Since(st), err)
}
