from tests.scripts import load_script

canvas_cost = load_script("tools/canvas_cost")


def test_a_burst_of_clicks_on_the_default_design_is_one_cheap_trigger():
    result = canvas_cost.run_case("64 one-block clicks, default design")
    (trigger,) = result["triggers"]
    assert trigger["strokes_done"] == result["strokes"] == 64
    assert trigger["cpu_s"] < 2 and result["message"] is None


def test_every_case_sends_strokes_numbered_from_one():
    for case in canvas_cost.CASES:
        shape = (16, 2048, 2048) if "16 x" in case else (1, 1024, 65536)
        strokes = canvas_cost.strokes_for(case, shape)
        assert [s["seq"] for s in strokes] == list(range(1, len(strokes) + 1))
