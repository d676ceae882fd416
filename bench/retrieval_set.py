"""bench.retrieval's labelled set: five synthetic reports and 120 questions whose answer page is known.

How it was made. Each report (a logistics firm's quarterly report, an espresso
machine's manual, a health trust's remote-work policy, an urban-heat research
summary, a city budget proposal) has twelve facts, written by hand, one per
page; a seeded shuffle places them among 16–20 pages, and every page is padded
with sentences drawn from the report's own pool of background prose (the same
vocabulary on every page: what makes retrieval hard) and a heading drawn from a
list. Each fact has two questions, written with it and before any method ran:

- ``exact`` shares the fact's rare words with it (a code, a name, a figure),
  as someone who has the document open would ask: where keyword search shines;
- ``paraphrase`` asks for the same fact in other words, sharing few or none of
  its content words, as someone who has not read it would ask: where
  embeddings shine.

Nothing was changed after seeing a method's scores. Every question is asked of
all five reports at once (a turn comparing attached documents), so the answer
must be found among ~90 pages.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SEED = 17


@dataclass(frozen=True)
class Fact:
    text: str
    exact: str
    paraphrase: str


@dataclass(frozen=True)
class Report:
    name: str
    title: str
    headings: tuple[str, ...]
    background: tuple[str, ...]
    facts: tuple[Fact, ...]


@dataclass(frozen=True)
class Document:
    name: str
    title: str
    pages: tuple[str, ...]  # page 1 first


@dataclass(frozen=True)
class Question:
    text: str
    kind: str  # exact | paraphrase
    document: str  # Document.name
    page: int  # 1-based: the page that holds the answer


REPORTS = (
    Report(
        name="northwind-q3-2024.pdf",
        title="Northwind Logistics Group — Interim Report, Third Quarter 2024",
        headings=("Operational review", "Financial review", "Group overview", "Outlook", "Segment information",
                  "Sustainability", "People", "Risk management"),
        background=(
            "The group operates road freight, contract logistics and parcel services across twelve European markets.",
            "Volumes in the contract logistics segment were broadly in line with the previous quarter.",
            "Management continues to focus on network density and on the utilisation of existing assets.",
            "Figures in this report are unaudited and presented in accordance with IFRS as adopted by the EU.",
            "Competition in the regional freight market remained intense throughout the period.",
            "The segment results exclude one-off items, which are reconciled in the notes.",
            "Customers in retail and consumer goods accounted for the largest share of group volumes.",
            "The integration of recent acquisitions is proceeding according to plan.",
            "Working capital was managed closely as payment terms lengthened across the industry.",
            "The group reports its results in euros; comparative figures have been restated where necessary.",
            "Investment decisions are assessed against a hurdle rate reviewed annually by the board.",
            "Further detail on each segment is provided in the tables at the end of this report.",
        ),
        facts=(
            Fact("Revenue for the third quarter reached 412.6 million euros, up 9 percent year on year, driven largely "
                 "by the new contract with Halvorsen Foods.",
                 "How much did the Halvorsen Foods contract help third-quarter revenue?",
                 "How much money did the company take in between July and September?"),
            Fact("The Rotterdam hub (site code RTM-22) cut average truck loading time from 47 to 31 minutes after "
                 "installing automated dock doors.",
                 "What changed at site RTM-22?",
                 "Which port facility got quicker at filling its lorries, and by how much?"),
            Fact("Fuel costs rose to 18.3 percent of operating expenses as diesel prices climbed in the summer.",
                 "What percentage of operating expenses were fuel costs?",
                 "What share of spending went on powering the vehicles?"),
            Fact("The board approved an interim dividend of 0.42 euros per share, payable on 15 November.",
                 "When is the 0.42 euro dividend paid?",
                 "How much will shareholders receive for each share they own?"),
            Fact("Employee turnover in the warehouse division fell to 11 percent following the introduction of the "
                 "Flexshift scheduling app.",
                 "What effect did the Flexshift app have?",
                 "Did fewer depot workers quit once they could pick their own hours?"),
            Fact("A cyberattack on 3 August disrupted the parcel tracking portal for nine hours; no customer data was "
                 "taken.",
                 "What happened to the parcel tracking portal on 3 August?",
                 "Was any client information stolen when hackers struck the company's systems?"),
            Fact("Electric vans now make up 23 percent of the urban delivery fleet, with 180 more Volta Zero units "
                 "ordered for 2025.",
                 "How many Volta Zero units were ordered?",
                 "How far along is the switch to battery-powered city delivery vehicles?"),
            Fact("Net debt stood at 1.1 billion euros at the end of September, a leverage ratio of 2.4 times EBITDA.",
                 "What is the leverage ratio to EBITDA?",
                 "How much does the firm owe relative to its earnings?"),
            Fact("The acquisition of Baltic Freight Lines for 65 million euros closed in September, adding 14 depots "
                 "in Latvia and Lithuania.",
                 "When did the Baltic Freight Lines acquisition close?",
                 "Which takeover expanded the depot network into two northern European countries?"),
            Fact("Customer satisfaction, measured by Net Promoter Score, improved from 31 to 38.",
                 "What was the Net Promoter Score?",
                 "Are clients happier with the service than before?"),
            Fact("Guidance for the full year was narrowed to an operating margin between 6.5 and 7 percent.",
                 "What is the full-year operating margin guidance?",
                 "What profitability does management expect for the whole of 2024?"),
            Fact("Capital expenditure of 58 million euros went mostly into the new cold-storage facility at Venlo.",
                 "What was built at Venlo?",
                 "Where is the company investing in refrigerated warehousing?"),
        ),
    ),
    Report(
        name="aquila-x200-manual.pdf",
        title="Aquila X200 Bean-to-Cup Espresso Machine — User Manual",
        headings=("Getting started", "Daily use", "Cleaning and care", "Troubleshooting", "Settings",
                  "Safety instructions", "Maintenance", "Technical data"),
        background=(
            "Read all instructions carefully before using the appliance for the first time.",
            "Always switch the machine off and unplug it before cleaning or maintenance.",
            "The illustrations in this manual may differ slightly from your model.",
            "Use only original spare parts and accessories recommended by the manufacturer.",
            "Keep the appliance out of reach of children under eight years of age.",
            "Place the machine on a flat, stable surface away from heat sources.",
            "The display shows the current status and guides you through each step.",
            "Coffee quality depends on the freshness of the beans and the water used.",
            "Dispose of packaging materials in accordance with local regulations.",
            "If a problem persists, contact customer service with the serial number of your machine.",
            "Press the power button to switch on; the machine heats up and rinses automatically.",
            "The appliance is intended for household use only.",
        ),
        facts=(
            Fact("To descale, fill the tank with 500 ml of water and one sachet of DS-40 descaler, then hold the steam "
                 "and cup buttons together for five seconds.",
                 "How do I use the DS-40 descaler?",
                 "What is the procedure for removing limescale from the machine?"),
            Fact("Error code E07 means the grinder is jammed; unplug the machine and clear the burrs with the supplied "
                 "brush.",
                 "What does error E07 mean?",
                 "The beans are no longer being milled and a fault appears on screen — what should I do?"),
            Fact("The water tank holds 1.8 litres and should be refilled only with cold, filtered water.",
                 "How many litres does the water tank hold?",
                 "What is the reservoir's capacity?"),
            Fact("The milk frother heats to 65 °C; for plant-based milk, select the Eco Foam setting to avoid "
                 "scorching.",
                 "What is the Eco Foam setting for?",
                 "How should I froth oat or soy milk without burning it?"),
            Fact("The warranty covers defects for 24 months from purchase but excludes damage caused by skipping "
                 "descaling.",
                 "Does the warranty cover damage from skipping descaling?",
                 "If the machine breaks after a year and a half, will the manufacturer repair it for free?"),
            Fact("Grind size is set with the dial on the bean hopper, from 1 (finest) to 12 (coarsest); start at 5 "
                 "for espresso.",
                 "Which grind size dial setting should I start with for espresso?",
                 "How do I make the coffee powder finer or coarser?"),
            Fact("The machine enters standby after 20 minutes without use, drawing less than 0.5 watts.",
                 "How much power in watts does standby draw?",
                 "Does the appliance switch itself off when left idle?"),
            Fact("Replace the AquaClean filter cartridge every 60 days or after 50 litres, whichever comes first.",
                 "How often should the AquaClean cartridge be replaced?",
                 "When do I need to change the water purifier insert?"),
            Fact("Error code E12 indicates the brewing unit is not seated; remove it, rinse it under the tap and click "
                 "it back into place.",
                 "What does error code E12 indicate?",
                 "The machine complains that a part inside isn't installed properly — how do I fix it?"),
            Fact("Pre-infusion wets the coffee puck for 3 seconds at low pressure before full extraction at 15 bar.",
                 "What pressure in bar does full extraction use?",
                 "Why does the machine pause briefly before pushing water through the grounds?"),
            Fact("Do not place the drip tray or bean hopper in the dishwasher; wash them by hand with mild soap.",
                 "Can the drip tray go in the dishwasher?",
                 "Which removable parts must be cleaned manually rather than in a machine?"),
            Fact("The child lock is enabled by pressing the menu button for eight seconds until the padlock symbol "
                 "appears.",
                 "How is the child lock enabled?",
                 "How can I stop my kids from operating the coffee maker?"),
        ),
    ),
    Report(
        name="meridian-remote-work-policy.docx",
        title="Meridian Health Trust — Remote Working and Information Security Policy (v3.2)",
        headings=("Scope", "Responsibilities", "Requirements", "Procedure", "Equipment", "Monitoring and review",
                  "Definitions", "Related documents"),
        background=(
            "This policy applies to all staff, contractors and volunteers who access Trust systems.",
            "Line managers are responsible for ensuring their teams are aware of this policy.",
            "The Trust is committed to protecting the confidentiality of patient and staff information.",
            "Nothing in this policy affects statutory rights under employment legislation.",
            "Questions about this policy should be directed to the Information Governance team.",
            "The policy should be read alongside the Trust's code of conduct and acceptable use policy.",
            "Exceptions must be agreed in writing and recorded by the relevant directorate.",
            "Compliance will be monitored through regular audits and incident reports.",
            "Training on information security is mandatory for all new starters.",
            "An equality impact assessment has been completed for this policy.",
            "Where this policy conflicts with local guidance, this policy takes precedence.",
            "Managers should consider individual circumstances fairly and consistently.",
        ),
        facts=(
            Fact("Employees may work remotely up to three days per week with the approval of their line manager.",
                 "How many days per week can employees work remotely?",
                 "How often am I allowed to do my job from home?"),
            Fact("Patient records must never be stored on personal devices; use the TrustVault application, which "
                 "encrypts data with AES-256.",
                 "Which encryption does TrustVault use?",
                 "Can I keep clinical files on my own phone?"),
            Fact("Suspected data breaches must be reported to the Information Governance team within 2 hours using "
                 "form IG-9.",
                 "What is form IG-9 used for?",
                 "What is the deadline for telling someone that confidential information may have leaked?"),
            Fact("Staff travelling abroad must request a loaner laptop from the IT Service Desk at least ten working "
                 "days in advance.",
                 "How far in advance must a loaner laptop be requested?",
                 "What equipment arrangements apply when I take a work trip to another country?"),
            Fact("A one-off home-office allowance of 300 pounds is paid for a chair, desk or monitor on submission of "
                 "receipts.",
                 "What is the 300 pound home-office allowance for?",
                 "Will the employer help pay for furniture to work at home?"),
            Fact("Passwords must be at least 14 characters and are changed only when compromise is suspected, "
                 "following NCSC guidance.",
                 "What is the minimum password length?",
                 "How long must the secret phrase I log in with be, and do I have to rotate it regularly?"),
            Fact("Video consultations with patients must use the approved platform, ClinicLink, never consumer "
                 "messaging apps.",
                 "What is ClinicLink approved for?",
                 "Can I talk to someone I'm treating over WhatsApp?"),
            Fact("Printed documents containing personal data must be destroyed in the cross-cut shredding bins, not "
                 "thrown in general waste.",
                 "Where must printed documents with personal data be destroyed?",
                 "How should I get rid of paper copies with names and addresses on them?"),
            Fact("Working outside 7am to 8pm requires the agreement of the department head, to protect rest periods "
                 "under the Working Time Regulations.",
                 "What do the Working Time Regulations require here?",
                 "Can I log on late at night to catch up?"),
            Fact("Breaches of this policy may lead to disciplinary action under procedure HR-14, up to and including "
                 "dismissal.",
                 "What is procedure HR-14?",
                 "What happens to someone who ignores these rules?"),
            Fact("The policy is reviewed annually by the Digital Risk Committee; the next review is due in March 2026.",
                 "When does the Digital Risk Committee next review the policy?",
                 "How often is this guidance revisited?"),
            Fact("Public Wi-Fi may be used only with the Trust VPN switched on, which connects automatically on "
                 "managed laptops.",
                 "Can public Wi-Fi be used with the VPN?",
                 "Is it safe to work from a café's internet connection?"),
        ),
    ),
    Report(
        name="urban-canopy-heat-study.pdf",
        title="Urban Tree Canopy and Summer Heat: Evidence from 40 Neighbourhoods in Seville and Lyon",
        headings=("Abstract", "Introduction", "Methods", "Results", "Discussion", "Limitations", "Conclusions",
                  "Data and funding"),
        background=(
            "Urban heat islands are a growing public health concern as summers become hotter.",
            "Neighbourhoods were selected to span a range of building densities and street orientations.",
            "All statistical analyses were performed in R using mixed-effects models.",
            "Previous studies have reported a wide range of effect sizes depending on climate and method.",
            "The two cities differ in climate, with Seville markedly hotter and drier than Lyon.",
            "Results are reported as means with 95 percent confidence intervals unless stated otherwise.",
            "Observations were collected between June and September of two consecutive years.",
            "The findings are relevant to municipal planning and climate adaptation strategies.",
            "Street-level conditions were classified using aerial imagery and field surveys.",
            "Local authorities in both cities provided access to planting records.",
            "The sample was stratified by district to ensure comparable coverage.",
            "Further work is needed to generalise these results to other climates.",
        ),
        facts=(
            Fact("Streets with more than 30 percent canopy cover were on average 2.8 °C cooler at 3 pm than streets "
                 "with less than 10 percent.",
                 "How much cooler were streets with more than 30 percent canopy cover?",
                 "Do leafy roads stay less hot in the afternoon, and by how many degrees?"),
            Fact("Air temperature was recorded by 212 iButton DS1923 loggers mounted 2 metres above the ground.",
                 "How many DS1923 loggers were used?",
                 "What instruments recorded the readings, and at what height?"),
            Fact("The cooling effect was strongest under plane trees (Platanus × hispanica) and weakest under palms.",
                 "Did Platanus or palms cool best?",
                 "Which kinds of trees provide the most shade relief?"),
            Fact("Hospital admissions for heat stroke in the sampled districts fell by 17 percent in the years after "
                 "planting programmes.",
                 "By how much did heat stroke admissions fall?",
                 "Did greening neighbourhoods reduce the number of people needing medical care in hot spells?"),
            Fact("Night-time cooling was smaller, 0.9 °C, because canopies trap long-wave radiation after sunset.",
                 "Why was night-time cooling only 0.9 °C?",
                 "Is the benefit the same after dark?"),
            Fact("Irrigation averaged 45 litres per tree per week during July, raising concerns in drought-prone "
                 "Seville.",
                 "How many litres per tree per week of irrigation were needed?",
                 "How much watering do the plantings require in midsummer?"),
            Fact("Residents' willingness to pay for additional trees was estimated at 38 euros per household per year "
                 "using a contingent valuation survey.",
                 "What did the contingent valuation survey find?",
                 "How much would locals spend each year to get more greenery?"),
            Fact("The study was funded by the European Research Council under grant ERC-2021-STG-101039.",
                 "Who funded the study under grant ERC-2021-STG-101039?",
                 "Where did the money for this research come from?"),
            Fact("Limitations include the short two-summer observation period and the lack of humidity data in Lyon.",
                 "What limitation concerned humidity data in Lyon?",
                 "What weaknesses do the authors admit in their work?"),
            Fact("Lower-income neighbourhoods had 40 percent less canopy cover than wealthier ones, a pattern the "
                 "authors call green inequity.",
                 "What is green inequity?",
                 "Do poorer areas have fewer trees?"),
            Fact("PM2.5 concentrations were 12 percent lower under dense canopy, though the difference was not "
                 "statistically significant.",
                 "Was PM2.5 lower under dense canopy?",
                 "Did the vegetation clean the air measurably?"),
            Fact("The authors recommend planting at least one tree per 8 metres of street frontage on south-facing "
                 "sidewalks.",
                 "What planting density per metres of street frontage is recommended?",
                 "How closely spaced should new trees be along a road?"),
        ),
    ),
    Report(
        name="harbour-city-budget-2025.html",
        title="Harbour City Council — Proposed Budget, Fiscal Year 2025",
        headings=("Message from the mayor", "Budget summary", "Revenue", "Public safety", "Transportation",
                  "Community services", "Capital plan", "Next steps"),
        background=(
            "The proposed budget reflects the priorities identified in last year's community survey.",
            "All figures are subject to council approval and may change during deliberations.",
            "Departments were asked to identify efficiencies before requesting new funding.",
            "The city maintains a balanced budget as required by its charter.",
            "Inflation continued to raise the cost of materials, energy and contracted services.",
            "Detailed departmental line items are available in the appendices.",
            "The council thanks residents who took part in the budget consultation workshops.",
            "Grant funding from the state and federal governments is shown separately.",
            "Staffing levels are expressed as full-time equivalent positions.",
            "The capital plan covers projects over a five-year horizon.",
            "Revenue estimates assume moderate growth in the local economy.",
            "Performance measures for each department are published alongside the budget.",
        ),
        facts=(
            Fact("The council proposes a total budget of 1.27 billion dollars for fiscal year 2025, a rise of 4.1 "
                 "percent.",
                 "What is the total budget for fiscal year 2025?",
                 "How much does the city plan to spend next year overall?"),
            Fact("Property tax will increase by 2.5 percent, adding about 61 dollars a year to the median household "
                 "bill.",
                 "How much will property tax increase?",
                 "What will a typical homeowner pay extra annually?"),
            Fact("The Route 9 bus rapid transit line receives 48 million dollars to complete its dedicated lanes by "
                 "2027.",
                 "How much funding does the Route 9 line receive?",
                 "What is being done to speed up public buses with their own road space?"),
            Fact("Library opening hours will be extended to Sundays at all eleven branches.",
                 "Will libraries open on Sundays?",
                 "When will residents be able to borrow books at the weekend?"),
            Fact("The fire department will hire 35 additional firefighters and replace four engines purchased in 2006.",
                 "How many additional firefighters will be hired?",
                 "How is emergency response staffing changing?"),
            Fact("A stormwater fee of 7 dollars per month will fund flood defences along the Kessel River.",
                 "What will the Kessel River stormwater fee fund?",
                 "What new charge on residents pays for keeping high water out of homes?"),
            Fact("Homelessness services receive 22 million dollars, including 300 new shelter beds at the former "
                 "Dunmore armoury.",
                 "What is planned at the Dunmore armoury?",
                 "How many more places will there be for people sleeping rough?"),
            Fact("The pension contribution rises to 14.2 percent of payroll following the actuarial review.",
                 "What is the pension contribution as a percentage of payroll?",
                 "How much more will the city set aside for retired staff?"),
            Fact("Road resurfacing covers 64 lane-miles, prioritised by the pavement condition index.",
                 "How many lane-miles will be resurfaced?",
                 "How much of the street network gets repaved?"),
            Fact("Parks maintenance is cut by 3 percent, mainly by reducing mowing frequency in low-use areas.",
                 "Why is parks maintenance cut by 3 percent?",
                 "Which service is getting less money, and how will residents notice?"),
            Fact("A 5 million dollar reserve is set aside for cyber security after the 2023 ransomware incident.",
                 "Why is a reserve set aside for cyber security?",
                 "What is being done to protect the council's computers from hackers?"),
            Fact("Public hearings on the proposal take place on 12 and 19 March at City Hall, with a final vote on "
                 "2 April.",
                 "When is the final vote on the budget?",
                 "When can residents speak to councillors about the spending plan?"),
        ),
    ),
)


def build(seed: int = SEED) -> tuple[list[Document], list[Question]]:
    """The documents (pages of text, paragraphs split by blank lines) and their questions, the same for a seed."""
    rng = random.Random(seed)
    documents: list[Document] = []
    questions: list[Question] = []
    for report in REPORTS:
        n_pages = len(report.facts) + rng.randint(4, 8)
        fact_pages = sorted(rng.sample(range(2, n_pages + 1), len(report.facts)))  # page 1 is the title page
        order = list(report.facts)
        rng.shuffle(order)
        at = dict(zip(fact_pages, order))
        pages = []
        for number in range(1, n_pages + 1):
            heading = report.title if number == 1 else f"{number - 1}. {rng.choice(report.headings)}"
            before = rng.sample(report.background, rng.randint(2, 4))
            after = rng.sample(report.background, rng.randint(2, 4))
            body = [" ".join(before)] + ([at[number].text] if number in at else []) + [" ".join(after)]
            pages.append("\n\n".join([heading, *body]))
        for number, fact in at.items():
            questions.append(Question(fact.exact, "exact", report.name, number))
            questions.append(Question(fact.paraphrase, "paraphrase", report.name, number))
        documents.append(Document(report.name, report.title, tuple(pages)))
    return documents, questions
